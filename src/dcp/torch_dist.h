// Megatron-LM's `torch_dist` checkpoint directory (Megatron-Core
// dist_checkpointing): a PyTorch DCP directory (read by dcp_dir.h) plus
// `metadata.json` (the backends: {"sharded_backend": "torch_dist", ...}) and
// `common.pt` (torch.save of the replicated state: iteration, args, ...).
//
// common.pt is read with the restricted pickle reader: any class name is
// recorded, none is imported or instantiated. CommonPtToJson renders it as
// JSON (at most 2^20 values, then "<truncated>", so shared references cannot
// blow it up): plain values as themselves, other objects as {"__class__":
// "module.name", ...} with the arguments and state they were pickled with,
// tensors as {"__tensor__": storage type, "size": [...]}.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "shardpoint/status.h"
#include "shardpoint/storage.h"

namespace shardpoint::internal_dcp {

inline constexpr char kTorchDistConfigName[] = "metadata.json";
inline constexpr char kTorchDistCommonName[] = "common.pt";
inline constexpr uint64_t kMaxCommonPtBytes = uint64_t{64} << 20;

struct TorchDistInfo {
  std::string config_json;   // metadata.json as stored
  std::string common_json;   // common.pt rendered (CommonPtToJson); "" if absent
  std::string common_bytes;  // common.pt as stored
  bool has_common = false;
};

// nullopt unless `dir` holds metadata.json naming sharded_backend
// "torch_dist". DataLoss for malformed metadata.json or common.pt (naming
// the file), FailedPrecondition for another sharded backend or a common.pt
// over kMaxCommonPtBytes.
Result<std::optional<TorchDistInfo>> ReadTorchDist(Storage* storage, const std::string& dir);

// common.pt (a torch.save archive) as JSON text. `what` names it in errors.
Result<std::string> CommonPtToJson(std::string_view bytes, const std::string& what);

}  // namespace shardpoint::internal_dcp
