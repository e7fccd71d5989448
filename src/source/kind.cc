#include <string>
#include <vector>

#include "shardpoint/checkpoint_kind.h"
#include "src/format/manifest.h"

namespace shardpoint {
namespace {

std::string Join(const std::string& dir, const char* name) {
  return dir.empty() || dir.back() == '/' ? dir + name : dir + "/" + name;
}

}  // namespace

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
  SP_ASSIGN_OR_RETURN(bool manifest, storage->Exists(Join(dir, internal_format::kManifestName)));
  if (manifest) return CheckpointKind::kShardpoint;
  SP_ASSIGN_OR_RETURN(bool dcp, storage->Exists(Join(dir, ".metadata")));
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
