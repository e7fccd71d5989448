// Layout builders: LocalTensors for the common ways a tensor is sharded.
//
// Each builder returns a LocalTensor whose segments say which box of which
// global tensor the caller's memory holds, so users rarely write boxes by
// hand. Uneven splits follow torch.chunk / DTensor Shard(dim): every shard
// gets ceil(n / count) rows, the last non-empty one the remainder, and shards
// past the end are empty. An empty shard still carries its (empty) segment,
// so every rank declares every key it takes part in.
//
// Builders are pure functions and thread-safe. They do not own or touch the
// memory they are given (`data`); it must be laid out as the returned
// LocalTensor's shape says (row-major, contiguous).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "shardpoint/tensor.h"

namespace shardpoint {

// The sizes of torch.chunk(n, count), padded with zeros to `count` entries:
// ChunkSizes(10, 4) = {3, 3, 3, 1}, ChunkSizes(5, 4) = {2, 2, 1, 0}.
// REQUIRES: n >= 0, count > 0 (otherwise returns an empty vector).
std::vector<int64_t> ChunkSizes(int64_t n, int count);

// A full replica of the tensor `key` of `shape`.
LocalTensor WholeTensor(std::string key, DType dtype, void* data, Shape shape);

// Shard `index` of `count` along `dim`, with ChunkSizes (torch.chunk) sizes:
// shard i covers [i*c, min((i+1)*c, n)) with c = ceil(n / count), possibly
// empty. InvalidArgument on a bad dim, index or count.
Result<LocalTensor> SplitTensor(std::string key, DType dtype, void* data, Shape global_shape,
                                int dim, int index, int count);

// Shard `index` of an explicit split along `dim`: shard i has sizes[i] rows,
// starting at the sum of the sizes before it. InvalidArgument unless the sizes
// are non-negative and sum to global_shape[dim].
Result<LocalTensor> SplitTensorSizes(std::string key, DType dtype, void* data, Shape global_shape,
                                     int dim, std::vector<int64_t> sizes, int index);

// The same segmented local tensor as `full_layout`, held only as the flat
// row-major range `range` of it (an FSDP / distributed-optimizer shard):
// `data` holds range.size() elements. full_layout.data is ignored.
// InvalidArgument unless full_layout is valid, contiguous and not already flat,
// and range lies within it.
Result<LocalTensor> FlatShard(LocalTensor full_layout, FlatRange range, void* data);

// Concatenates local tensors along `dim` into one local tensor at `data`,
// keeping every part's segments (a fused weight such as SwiGLU fc1 = [W_i; V_i]
// is Concat({SplitTensor(W), SplitTensor(V)}, 0, data)). InvalidArgument unless
// the parts share dtype and rank, agree in every other dim, are contiguous and
// not flat, and the result is valid (e.g. the same box is not held twice).
Result<LocalTensor> Concat(std::vector<LocalTensor> parts, int dim, void* data);

}  // namespace shardpoint
