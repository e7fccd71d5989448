// DetectCheckpointKind: the one place that decides what a directory holds
// (the door, src/source/open_source.h and mapped_source.h, opens it as that).
#include <string>
#include <vector>

#include "shardpoint/checkpoint_kind.h"
#include "src/dcp/metadata.h"
#include "src/io/path.h"
#include "src/source/manifest_read.h"

namespace shardpoint {

const char* CheckpointKindName(CheckpointKind kind) {
  switch (kind) {
    case CheckpointKind::kShardpoint:
      return "shardpoint";
    case CheckpointKind::kPyTorchDcp:
      return "pytorch_dcp";
    case CheckpointKind::kHfModel:
      return "hf_model";
    case CheckpointKind::kNone:
      break;
  }
  return "none";
}

Result<CheckpointKind> DetectCheckpointKind(const std::string& dir, Storage* storage) {
  if (storage == nullptr) storage = DefaultStorage();
  SP_ASSIGN_OR_RETURN(bool manifest, internal_source::HasManifest(storage, dir));
  if (manifest) return CheckpointKind::kShardpoint;
  SP_ASSIGN_OR_RETURN(bool dcp,
                      storage->Exists(internal_io::JoinPath(dir, internal_dcp::kDcpMetadataName)));
  if (dcp) return CheckpointKind::kPyTorchDcp;
  SP_ASSIGN_OR_RETURN(bool is_dir, storage->IsDirectory(dir));
  if (!is_dir) return CheckpointKind::kNone;
  SP_ASSIGN_OR_RETURN(std::vector<std::string> names, storage->ListDir(dir));
  for (const std::string& n : names) {
    if (n.size() > 12 && n.compare(n.size() - 12, 12, ".safetensors") == 0) {
      return CheckpointKind::kHfModel;
    }
  }
  return CheckpointKind::kNone;
}

}  // namespace shardpoint
