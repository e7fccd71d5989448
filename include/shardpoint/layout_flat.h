// Flat buffers: several parameters back to back in one buffer, split evenly
// over data-parallel ranks (FSDP flat parameters, ZeRO, the Megatron
// distributed optimizer).
//
// Every parameter is a local layout (whole, TP shard or fused; see layout.h,
// layout_fused.h) placed in the buffer at an offset aligned to `align`
// elements; the buffer is padded to a multiple of dp_size * align and rank r
// holds elements [r * S, (r + 1) * S), S = total / dp_size. A rank's shard may
// begin or end inside a parameter ("item coordinates"): each parameter's
// piece is that parameter's layout held as a flat range (FlatShard), so the
// split of a fused weight is always computed in the parameter's own
// coordinates, never in the shard's. fp32 main params and Adam moments use
// the same layout with their own memory.
//
// Pure functions, thread-safe. The shard memory belongs to the caller.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "shardpoint/tensor.h"

namespace shardpoint {

struct FlatBufferLayout {
  std::vector<int64_t> offsets;  // each parameter's first element in the buffer
  std::vector<int64_t> sizes;    // each parameter's element count
  int64_t total = 0;             // padded buffer size (a multiple of dp_size * align)
  int64_t shard_size = 0;        // elements per DP rank
  int dp_size = 1;
};

// Places `params` (their shapes; data ignored) back to back. InvalidArgument
// on a flat or strided parameter, align < 1 or dp_size < 1.
Result<FlatBufferLayout> PlanFlatBuffer(const std::vector<LocalTensor>& params, int64_t align,
                                        int dp_size);

// Rank `dp_rank`'s pieces: one LocalTensor per parameter, in order, each the
// parameter's layout held as the flat range that falls in this rank's shard,
// with data inside `shard_data` (shard_size elements of `dtype`). A parameter
// outside the shard gets an empty range (it declares its keys and holds
// nothing). `dtype` defaults to the params' own (they must agree); pass
// DType::kF32 to lay out fp32 main params or Adam moments of bf16 params, as
// plain local tensors in the same item coordinates. Keys are the params'
// keys: prefix them (AddKeyPrefix, layout_state.h) for optimizer states.
// REQUIRES: `layout` came from PlanFlatBuffer(params, ...).
Result<std::vector<LocalTensor>> FlatBufferShard(const std::vector<LocalTensor>& params,
                                                 const FlatBufferLayout& layout, int dp_rank,
                                                 void* shard_data,
                                                 std::optional<DType> dtype = std::nullopt);

}  // namespace shardpoint
