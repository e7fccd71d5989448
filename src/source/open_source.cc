#include "src/source/open_source.h"

#include <optional>
#include <utility>

#include "src/dcp/dcp_dir.h"
#include "src/format/manifest.h"
#include "src/io/path.h"
#include "src/source/manifest_read.h"
#include "src/source/manifest_shards.h"

using shardpoint::internal_io::JoinPath;

namespace shardpoint::internal_source {

Result<std::string> ReadSourceBytes(Storage* storage, const std::string& dir, CheckpointKind kind) {
  if (kind == CheckpointKind::kPyTorchDcp) {
    SP_ASSIGN_OR_RETURN(internal_dcp::DcpIndex idx, internal_dcp::ReadDcpIndex(storage, dir));
    return "D" + internal_dcp::EncodeDcpIndex(idx.m, idx.views);
  }
  // A v3 to v6 index as is: the load fetches each rank's shards (manifest_fetch.h).
  SP_ASSIGN_OR_RETURN(std::string bytes, ReadManifestFile(storage, dir));
  return "S" + bytes;
}

Result<std::string> ReadSourceBytes(Storage* storage, const std::string& dir) {
  SP_ASSIGN_OR_RETURN(std::optional<std::string> top, ManifestReadWhole(storage, dir));
  if (top) return "S" + *top;  // an object store: one GET, no HEAD
  SP_ASSIGN_OR_RETURN(CheckpointKind kind, DetectCheckpointKind(dir, storage));
  return ReadSourceBytes(storage, dir, kind);
}

Source EmptySource(const std::string& dir, bool dcp) {
  Source src;
  src.dir = dir;
  src.checkpoint_kind = dcp ? CheckpointKind::kPyTorchDcp : CheckpointKind::kShardpoint;
  src.kind = "checkpoint";
  src.name = "checkpoint '" + dir + "'";
  src.has_checksums = !dcp;  // DCP stores none
  return src;
}

Result<Source> DecodeSource(std::string_view bytes, const std::string& dir) {
  const bool dcp = !bytes.empty() && bytes[0] == 'D';
  Source src = EmptySource(dir, dcp);
  if (!bytes.empty()) bytes.remove_prefix(1);
  if (!dcp) {
    SP_ASSIGN_OR_RETURN(src.index, internal_format::DecodeManifest(
                                       bytes, JoinPath(dir, internal_format::kManifestName)));
    return src;
  }
  SP_ASSIGN_OR_RETURN(internal_dcp::DcpTransitIndex idx, internal_dcp::DecodeDcpIndex(bytes, dir));
  src.index = std::move(idx.m);
  src.views = std::move(idx.views);
  return src;
}

Result<Source> OpenCheckpointSource(Storage* storage, const std::string& dir, CheckpointKind kind) {
  const bool dcp = kind == CheckpointKind::kPyTorchDcp;
  Source src = EmptySource(dir, dcp);
  if (!dcp) {
    SP_ASSIGN_OR_RETURN(src.index, ReadManifest(storage, dir));
    return src;
  }
  SP_ASSIGN_OR_RETURN(internal_dcp::DcpIndex idx, internal_dcp::ReadDcpIndex(storage, dir));
  src.index = std::move(idx.m);
  src.views = std::move(idx.views);
  src.dcp_entries = std::move(idx.entries);
  return src;
}

Result<Source> OpenCheckpointSource(Storage* storage, const std::string& dir) {
  SP_ASSIGN_OR_RETURN(std::optional<std::string> top, ManifestReadWhole(storage, dir));
  if (top) {  // an object store: one GET, no HEAD
    Source src = EmptySource(dir, false);
    SP_ASSIGN_OR_RETURN(src.index, WholeManifest(storage, dir, *top));
    return src;
  }
  SP_ASSIGN_OR_RETURN(CheckpointKind kind, DetectCheckpointKind(dir, storage));
  return OpenCheckpointSource(storage, dir, kind);
}

}  // namespace shardpoint::internal_source
