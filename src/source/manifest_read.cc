#include "src/source/manifest_read.h"

#include <optional>
#include <string>
#include <utility>

#include "src/io/path.h"
#include "src/io/staged_output.h"
#include "src/io/whole_file.h"
#include "src/source/manifest_shards.h"
#include "src/source/remove_checkpoint.h"

using shardpoint::internal_format::kManifestName;
using shardpoint::internal_format::Manifest;
using shardpoint::internal_io::JoinPath;
using shardpoint::internal_io::ReadFileIfPresent;
using shardpoint::internal_io::ReadsWholeFiles;
using shardpoint::internal_io::RecoverSwap;

namespace shardpoint::internal_source {

Result<bool> HasManifest(Storage* storage, const std::string& dir) {
  return storage->Exists(JoinPath(dir, kManifestName));
}

Result<bool> RecoverCheckpointSwap(Storage* storage, const std::string& dir) {
  return RecoverSwap(
      storage, dir, [storage](const std::string& partial) { return HasManifest(storage, partial); },
      [storage](const std::string& old) { return RemoveCheckpoint(storage, old); });
}

Result<std::string> ReadManifestFile(Storage* storage, const std::string& dir) {
  const std::string path = JoinPath(dir, kManifestName);
  // One GET on an object store; Exists, then the read, on POSIX.
  SP_ASSIGN_OR_RETURN(std::optional<std::string> top, ReadFileIfPresent(storage, path));
  if (top) return std::move(*top);
  SP_ASSIGN_OR_RETURN(bool recovered, RecoverCheckpointSwap(storage, dir));
  if (recovered) return storage->ReadFileToString(path);
  return NotFoundError("no checkpoint at '" + dir + "': '" + path +
                       "' does not exist (a save that did not commit leaves no manifest)");
}

Result<std::optional<std::string>> ManifestReadWhole(Storage* storage, const std::string& dir) {
  const std::string path = JoinPath(dir, kManifestName);
  if (!ReadsWholeFiles(storage, path)) return std::optional<std::string>();
  return ReadFileIfPresent(storage, path);
}

Result<std::string> ReadManifestBytes(Storage* storage, const std::string& dir) {
  SP_ASSIGN_OR_RETURN(std::string top, ReadManifestFile(storage, dir));
  return WholeManifestBytes(storage, dir, std::move(top));
}

Result<Manifest> ReadManifest(Storage* storage, const std::string& dir) {
  SP_ASSIGN_OR_RETURN(std::string top, ReadManifestFile(storage, dir));
  return WholeManifest(storage, dir, top);
}

}  // namespace shardpoint::internal_source
