// Where each tensor of a checkpoint lands in the Hugging Face tensors a
// mapping names: the plan export-hf writes by, for a caller that loads a
// checkpoint's keys into a model named the HF way (a Megatron torch_dist
// checkpoint, stacked and fused keys, into a torch model with per-layer
// HF names: shardpoint.torch's TrainState.load(mapping=...)).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "shardpoint/box.h"
#include "shardpoint/hf_load.h"
#include "shardpoint/hf_mapping.h"
#include "shardpoint/status.h"

namespace shardpoint {

// One piece: row-major elements of `box` of stored tensor `key` are the
// elements [hf_offset, hf_offset + box.num_elements()) of HF tensor `hf`
// (global shape `hf_shape`).
struct HfPlacement {
  std::string key;    // the stored key
  std::string state;  // "" for a model key; <name> for a key optimizer.state.<name>.<k>
  std::string hf;
  Shape hf_shape;
  int64_t hf_offset = 0;
  Box box;
};

// Every piece of every tensor of checkpoint `dir` (shardpoint, DCP or
// Megatron torch_dist; an HF model under the identity) under `mapping`, with
// the variables export-hf uses (the mapping's defaults, a Megatron
// checkpoint's common.pt args, the stored HF config, options.variables). An
// optimizer-state key optimizer.state.<name>.<k> (Megatron's per-parameter
// layouts and its rebuilt dp_reshardable buckets) is placed as key <k> is,
// with `state` <name>. Keys the mapping skips or leaves unmatched are
// absent; a key the mapping cannot place is an error naming it.
Result<std::vector<HfPlacement>> PlaceInHf(const std::string& dir, const HfMapping& mapping,
                                           const HfOptions& options = {});

}  // namespace shardpoint
