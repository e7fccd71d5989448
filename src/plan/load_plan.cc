#include "src/plan/load_plan.h"

#include <algorithm>
#include <unordered_map>

#include "src/geometry/flat_range.h"

using shardpoint::internal_format::ChunkRecord;
using shardpoint::internal_format::Manifest;
using shardpoint::internal_format::TensorRecord;
using shardpoint::internal_geometry::RowMajorIndex;

namespace shardpoint::internal_plan {
namespace {

// Chunks of a tensor are sorted by box, hence by their start in dim 0. A
// chunk overlapping [lo, hi) in dim 0 starts before hi and after
// lo - max_extent0.
struct ChunkIndex {
  int64_t max_extent0 = 0;
};

ChunkIndex BuildIndex(const TensorRecord& t) {
  ChunkIndex idx;
  if (t.shape.empty()) return idx;
  for (const ChunkRecord& c : t.chunks) idx.max_extent0 = std::max(idx.max_extent0, c.box.shape[0]);
  return idx;
}

}  // namespace

RunPattern RunsOf(const Shape& chunk_shape, const Box& in_chunk) {
  const size_t n = chunk_shape.size();
  size_t k = 0;
  for (size_t d = n; d-- > 0;) {
    if (in_chunk.shape[d] != chunk_shape[d]) {
      k = d;
      break;
    }
  }
  RunPattern p{1, 1, k};
  for (size_t d = 0; d < k; ++d) p.runs *= in_chunk.shape[d];
  if (n > 0) p.run_elements = in_chunk.shape[k];
  for (size_t d = k + 1; d < n; ++d) p.run_elements *= chunk_shape[d];
  return p;
}

int64_t RunStart(const Shape& chunk_shape, const Box& in_chunk, const RunPattern& p, int64_t i) {
  // Unravel i over the dims [0, p.outer_dims) of in_chunk, row-major.
  Shape idx = in_chunk.offset;
  for (size_t d = p.outer_dims; d-- > 0;) {
    idx[d] += i % in_chunk.shape[d];
    i /= in_chunk.shape[d];
  }
  return RowMajorIndex(chunk_shape, idx);
}

int64_t ElementsBefore(const Shape& chunk_shape, const Box& in_chunk, int64_t linear) {
  const int64_t total = in_chunk.num_elements();
  int64_t chunk_elements = 1;
  for (int64_t d : chunk_shape) chunk_elements *= d;
  if (total == 0 || linear <= 0) return 0;
  if (linear >= chunk_elements) return total;
  // Unravel `linear`; count the box elements before it dim by dim: those whose
  // leading coordinates equal its own and whose next one is smaller.
  const size_t n = chunk_shape.size();
  Shape idx(n, 0);
  for (size_t d = n; d-- > 0;) {
    idx[d] = linear % chunk_shape[d];
    linear /= chunk_shape[d];
  }
  int64_t count = 0, inner = total;
  for (size_t d = 0; d < n; ++d) {
    inner /= in_chunk.shape[d];
    const int64_t lo = in_chunk.offset[d];
    count += std::clamp<int64_t>(idx[d] - lo, 0, in_chunk.shape[d]) * inner;
    if (idx[d] < lo || idx[d] >= lo + in_chunk.shape[d]) break;
  }
  return count;
}

Result<LoadPlan> PlanLoad(const Manifest& m, const std::vector<Region>& regions,
                          bool allow_shape_mismatch) {
  LoadPlan plan;
  std::unordered_map<int64_t, ChunkIndex> indexes;
  for (const Region& r : regions) {
    if (r.desc.box.empty()) continue;
    int64_t t = m.FindTensor(r.desc.key);
    if (t < 0) continue;
    const TensorRecord& rec = m.tensors[t];
    auto [it, fresh] = indexes.try_emplace(t);
    if (fresh) it->second = BuildIndex(rec);
    const ChunkIndex& idx = it->second;

    // The part of the region the checkpoint can supply: all of it, unless the
    // stored global shape differs (a padded vocabulary) and that is allowed.
    Box want = r.desc.box;
    if (rec.shape != r.desc.global_shape) {
      if (!allow_shape_mismatch || rec.shape.size() != r.desc.global_shape.size()) {
        return InvalidArgumentError("tensor '" + r.desc.key + "': requested global shape " +
                                    ShapeToString(r.desc.global_shape) +
                                    " but the checkpoint holds " + ShapeToString(rec.shape));
      }
      std::optional<Box> overlap = Intersect(want, Box::Whole(rec.shape));
      if (overlap != want) plan.zero_fill.push_back(r.view);
      if (!overlap) continue;
      want = *overlap;
    }

    auto begin = rec.chunks.begin();
    auto end = rec.chunks.end();
    if (!rec.shape.empty()) {
      const int64_t lo = want.offset[0], hi = lo + want.shape[0];
      end = std::partition_point(begin, end,
                                 [&](const ChunkRecord& c) { return c.box.offset[0] < hi; });
      begin = std::partition_point(begin, end, [&](const ChunkRecord& c) {
        return c.box.offset[0] + idx.max_extent0 <= lo;
      });
    }
    int64_t covered = 0;
    for (auto c = begin; c != end; ++c) {
      std::optional<Box> ib = Intersect(c->box, want);
      if (!ib) continue;
      ReadPiece p;
      p.tensor = t;
      p.chunk = c - rec.chunks.begin();
      p.in_chunk = *ib;
      Box in_region = *ib;
      for (size_t d = 0; d < ib->rank(); ++d) {
        p.in_chunk.offset[d] -= c->box.offset[d];
        in_region.offset[d] -= r.desc.box.offset[d];
      }
      p.dst = r.view.Sub(in_region);
      p.src_dtype = rec.dtype;
      p.dst_dtype = r.desc.dtype;
      p.whole_chunk = (*ib == c->box);
      p.nbytes = static_cast<uint64_t>(ib->num_elements()) * DTypeSize(rec.dtype);
      p.local = r.local;
      covered += ib->num_elements();
      plan.bytes += p.nbytes;
      plan.pieces.push_back(std::move(p));
    }
    if (covered != want.num_elements()) {
      return DataLossError(
          "tensor '" + r.desc.key + "': stored chunks cover " + std::to_string(covered) +
          " of the " + std::to_string(want.num_elements()) + " elements of box " + want.ToString());
    }
  }
  std::sort(plan.pieces.begin(), plan.pieces.end(), [&](const ReadPiece& a, const ReadPiece& b) {
    const ChunkRecord& ca = m.tensors[a.tensor].chunks[a.chunk];
    const ChunkRecord& cb = m.tensors[b.tensor].chunks[b.chunk];
    return std::tie(ca.file, ca.offset) < std::tie(cb.file, cb.offset);
  });
  return plan;
}

}  // namespace shardpoint::internal_plan
