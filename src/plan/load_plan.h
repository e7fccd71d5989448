// The load plan of one rank: which stored bytes go where. Pure.
#pragma once

#include <cstdint>
#include <vector>

#include "src/format/manifest.h"
#include "src/plan/regions.h"

namespace shardpoint::internal_plan {

// The intersection of one stored chunk with one requested region. Its bytes
// in the file are `runs` contiguous runs (row-major over the chunk), each of
// `run_elements` elements; the executor reads each run (nothing else) and
// places it at the matching flat range of `dst`.
struct ReadPiece {
  int64_t tensor = 0;           // manifest.tensors index
  int64_t chunk = 0;            // its chunk index
  Box in_chunk;                 // the part read, relative to the chunk's box
  internal_geometry::View dst;  // destination, shape == in_chunk.shape
  DType src_dtype = DType::kF32;
  DType dst_dtype = DType::kF32;
  bool whole_chunk = false;  // in_chunk is the whole chunk: its checksum can be verified
  uint64_t nbytes = 0;       // stored bytes read
  size_t local = 0;          // the local tensor dst lies in (Region::local)
};

struct LoadPlan {
  std::vector<ReadPiece> pieces;  // sorted by (file, offset) for sequential access
  // Destinations to set to zero before the reads: requested regions that reach
  // past the stored tensor's extent (allow_shape_mismatch only).
  std::vector<internal_geometry::View> zero_fill;
  uint64_t bytes = 0;
};

// For every region whose key is in the manifest, finds the overlapping chunks
// through a per-key index (chunks are sorted by box; a binary search on the
// first dim bounded by the largest chunk extent there) and emits pieces.
// Regions of keys not in `m` are skipped (the caller reports them). A region
// not fully covered by chunks is DataLoss naming the key and box.
// With `allow_shape_mismatch`, a region whose global shape differs from the
// stored one (same rank) is read where it overlaps the stored extent and the
// rest is listed in zero_fill; without it, such a region is InvalidArgument.
Result<LoadPlan> PlanLoad(const internal_format::Manifest& m, const std::vector<Region>& regions,
                          bool allow_shape_mismatch = false);

// The contiguous runs of `in_chunk` inside a chunk of shape `chunk_shape`:
// run i covers elements [first + i*stride, first + i*stride + run) of the
// chunk (row-major), and flat range [i*run, (i+1)*run) of the piece.
struct RunPattern {
  int64_t runs = 0;
  int64_t run_elements = 0;
  size_t outer_dims = 0;  // runs enumerate in_chunk's dims [0, outer_dims)
};
RunPattern RunsOf(const Shape& chunk_shape, const Box& in_chunk);
// The chunk-relative linear element index where run i starts.
int64_t RunStart(const Shape& chunk_shape, const Box& in_chunk, const RunPattern& p, int64_t i);
// The number of elements of `in_chunk` whose chunk-relative row-major index
// is below `linear` (0 <= linear <= the chunk's element count), in O(rank):
// the elements of a piece that lie in chunk elements [a, b) are its flat
// range [ElementsBefore(a), ElementsBefore(b)).
int64_t ElementsBefore(const Shape& chunk_shape, const Box& in_chunk, int64_t linear);

}  // namespace shardpoint::internal_plan
