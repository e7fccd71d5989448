#include "src/source/remove_checkpoint.h"

#include <string>

#include "src/format/manifest.h"
#include "src/io/path.h"

using shardpoint::internal_format::kManifestName;
using shardpoint::internal_io::JoinPath;

namespace shardpoint::internal_source {

Status RemoveCheckpoint(Storage* storage, const std::string& dir) {
  const std::string manifest = JoinPath(dir, kManifestName);
  SP_ASSIGN_OR_RETURN(bool exists, storage->Exists(manifest));
  if (exists) {
    SP_RETURN_IF_ERROR(storage->RemoveFile(manifest));
    SP_RETURN_IF_ERROR(storage->SyncDir(dir));
  }
  return storage->RemoveAll(dir);
}

}  // namespace shardpoint::internal_source
