// Megatron-Core's N-D flattened tensors: how Megatron-Core up to 0.15 stores
// a tensor of which each rank holds a flat range of its local shard (the
// distributed optimizer's `fully_sharded_model_space` state: each DP rank
// owns a slice of the flattened TP shard of a parameter). A tensor of global
// shape [X, Y, Z] whose local shards are [x, y, z] is stored as a DCP tensor
// of shape [X / x, Y / y, Z / z, x * y * z]: one row per local shard (block),
// and each stored chunk [i, j, k, s : s + n] holds the row-major elements
// [s, s + n) of block (i, j, k). `.metadata` records the original shape in
// `mcore_data[fqn]["nd_reformulated_orig_global_shape"]` (metadata.h).
//
// Rebuilt here into the original tensor: each chunk becomes the boxes of
// its flat range inside its block (FlatRangeToBoxes: at most 2 n - 1, each a
// contiguous run of the stored bytes), so every reader (a resharded Load,
// export, convert, diff, verify) sees the parameter-shaped tensor.
#pragma once

#include <string>
#include <vector>

#include "shardpoint/box.h"
#include "shardpoint/status.h"
#include "src/format/manifest.h"

namespace shardpoint::internal_dcp {

// Rewrites `t` (as stored) into the tensor of shape `orig`. Returns, for
// each of t's chunks before the call (in their order), the index of its
// first box among the new chunks (-1 for an empty chunk). DataLoss naming
// the key if the stored shape is not [orig / block..., numel(block)] or a
// chunk is not a flat range of one block.
Result<std::vector<int64_t>> UnflattenNdTensor(const Shape& orig, internal_format::TensorRecord* t);

}  // namespace shardpoint::internal_dcp
