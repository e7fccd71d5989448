// LocalTensor: what one rank holds of one or more global tensors.
//
// A rank's local tensor is memory plus a map. The map is a list of segments,
// each placing a box of some global tensor at an offset of the local tensor.
// One segment is the common case (a TP shard); several segments express fused
// weights (SwiGLU fc1 = [W_i; V_i], interleaved QKV, fused experts). A local
// tensor may be held only as a flat range [begin, end) of its row-major
// elements (FSDP / distributed-optimizer shards): then `data` holds exactly
// those end - begin elements, contiguously.
//
// LocalTensor does not own `data`; the memory must stay valid (and, during a
// load, writable) for the duration of the call that uses it. Plain value type.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "shardpoint/box.h"
#include "shardpoint/dtype.h"

namespace shardpoint {

struct Segment {
  std::string key;     // the global tensor, e.g. "decoder.layers.3.mlp.fc1.weight"
  Shape global_shape;  // the global tensor's shape
  Box global_box;      // the part of the global tensor this segment holds
  // Where global_box starts in the local tensor. Its length is the local rank,
  // which may exceed the global rank: then the segment occupies leading dims
  // of extent 1 (a per-expert [I, H] tensor placed in a stacked [E, I, H]).
  Shape local_offset;
};

struct FlatRange {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
  friend bool operator==(const FlatRange& a, const FlatRange& b) {
    return a.begin == b.begin && a.end == b.end;
  }
};

struct LocalTensor {
  DType dtype = DType::kF32;
  void* data = nullptr;
  Shape shape;                    // the local tensor's logical shape
  Shape strides;                  // element strides of data; empty = row-major contiguous
  std::vector<Segment> segments;  // what the local tensor holds
  std::optional<FlatRange> flat;  // if set: data holds only these row-major elements
};

// InvalidArgument unless `t` is self-consistent: segments inside the local
// shape and their global shape, pairwise disjoint in the local tensor, flat
// range inside the local tensor, strides usable. Names the segment's key.
Status ValidateLocalTensor(const LocalTensor& t);

}  // namespace shardpoint
