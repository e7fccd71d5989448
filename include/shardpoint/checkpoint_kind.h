// What kind of checkpoint directory a path holds, decided in one place
// (src/source/kind.cc) by the files it has, and used by every reader: load,
// verify, describe/inspect, diff, export and convert.
#pragma once

#include <string>

#include "shardpoint/status.h"
#include "shardpoint/storage.h"

namespace shardpoint {

enum class CheckpointKind {
  kNone,        // none of the below, or no such directory
  kShardpoint,  // holds `manifest` (format.md)
  kPyTorchDcp,  // holds `.metadata` (dcp.md; Megatron torch_dist checkpoints too)
  kHfModel,     // holds *.safetensors and neither of the above (huggingface.md)
};

// "shardpoint", "pytorch_dcp", "hf_model", "none": as `inspect --json` prints it.
const char* CheckpointKindName(CheckpointKind kind);

// The kind of `dir`, through `storage` (nullptr: DefaultStorage()). Precedence
// when several marks are present: manifest, then .metadata, then
// *.safetensors. Errors only where the storage fails (EACCES, EIO).
Result<CheckpointKind> DetectCheckpointKind(const std::string& dir, Storage* storage = nullptr);

}  // namespace shardpoint
