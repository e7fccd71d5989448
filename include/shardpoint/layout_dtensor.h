// DTensor-style layouts: a device mesh, this rank's coordinate in it, and one
// placement per mesh dim, as in torch.distributed.tensor.
//
// Placements are applied in mesh-dim order, each to the local tensor left by
// the ones before it (PyTorch's rule, see docs/layouts.md):
//   Shard(d)                  the local extent of dim d is cut with
//                             torch.chunk into mesh_shape[i] pieces and the
//                             rank keeps piece coord[i] (trailing pieces
//                             smaller or empty);
//   Replicate()               nothing changes;
//   StridedShard(d, sf)       (PyTorch's _StridedShard, FSDP2 over TP) the
//                             local extent of dim d is first cut into sf
//                             pieces (the sharding a later mesh dim applies),
//                             each of those into mesh_shape[i] pieces, and the
//                             rank keeps piece coord[i] of each, concatenated.
// The local tensor may then hold several runs of dim d (one segment each);
// with the usual (StridedShard(0, tp), Shard(0)) of FSDP2 x TP it is one box.
// An empty shard is reported at offset global_shape[d], as PyTorch does.
// For a few uneven sizes those placements describe other rows than FSDP2
// actually holds (docs/layouts.md); ShardLocal of the TP layout always
// describes FSDP2's data.
//
// Pure functions, thread-safe; the memory passed as `data` is not touched.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "shardpoint/tensor.h"

namespace shardpoint {

struct Placement {
  enum class Kind { kReplicate, kShard, kStridedShard };
  Kind kind = Kind::kReplicate;
  int dim = 0;           // tensor dim (Shard, StridedShard)
  int split_factor = 1;  // StridedShard only

  static Placement Replicate() { return {}; }
  static Placement Shard(int dim) { return {Kind::kShard, dim, 1}; }
  static Placement StridedShard(int dim, int split_factor) {
    return {Kind::kStridedShard, dim, split_factor};
  }
  std::string ToString() const;  // "Shard(0)", "StridedShard(0, 2)", "Replicate()"
};

struct DeviceMesh {
  Shape shape;       // ranks per mesh dim, e.g. {dp, tp}
  Shape coordinate;  // this rank's coordinate, same length
};

// The global boxes this rank holds, in local order (concatenated along the
// sharded dims they form the local tensor). One box in the common cases; its
// shape is PyTorch's local shape and its offset the global offset
// (compute_local_shape_and_global_offset). InvalidArgument on a bad mesh,
// coordinate or placement, naming it.
Result<std::vector<Box>> DTensorLocalBoxes(const Shape& global_shape, const DeviceMesh& mesh,
                                           const std::vector<Placement>& placements);

// The local tensor of a DTensor of `global_shape` on this rank: shape as
// PyTorch computes it, one segment per box of DTensorLocalBoxes.
Result<LocalTensor> DTensorShard(std::string key, DType dtype, void* data, Shape global_shape,
                                 const DeviceMesh& mesh, const std::vector<Placement>& placements);

// Applies Shard(dim) over `count` ranks to an already built local layout:
// keeps chunk `index` (torch.chunk) of local dim `dim`, clipping every
// segment (FSDP2 sharding a TP-sharded or fused parameter: the fused [W_i;
// V_i] of SwiGLU may be cut inside W, inside V or on the border). Segments
// left empty stay as empty declarations. REQUIRES a contiguous, non-flat
// layout; `data` is the new memory.
Result<LocalTensor> ShardLocal(LocalTensor local, int dim, int index, int count, void* data);

}  // namespace shardpoint
