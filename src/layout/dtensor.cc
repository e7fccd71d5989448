// DTensor placements: local shape and global offset as PyTorch computes them,
// including _StridedShard (FSDP2 over TP) and uneven torch.chunk sizes.
//
// Per tensor dim the rank's data is tracked as a list of runs of global
// indices, in local order. Shard cuts the concatenated runs; StridedShard
// cuts them into split_factor pieces, each of those into mesh-size pieces,
// and keeps one piece of each. The boxes are the product of the runs.
#include <algorithm>
#include <string>
#include <utility>

#include "shardpoint/layout.h"
#include "shardpoint/layout_dtensor.h"

namespace shardpoint {
namespace {

struct Run {
  int64_t begin = 0, end = 0;  // global indices [begin, end)
};

int64_t Length(const std::vector<Run>& runs) {
  int64_t n = 0;
  for (const Run& r : runs) n += r.end - r.begin;
  return n;
}

// Appends local indices [a, b) of the concatenated runs to `out`.
void Slice(const std::vector<Run>& runs, int64_t a, int64_t b, std::vector<Run>* out) {
  int64_t pos = 0;
  for (const Run& r : runs) {
    const int64_t len = r.end - r.begin;
    const int64_t lo = std::max(a, pos), hi = std::min(b, pos + len);
    if (lo < hi) out->push_back({r.begin + lo - pos, r.begin + hi - pos});
    pos += len;
  }
}

int64_t Before(const std::vector<int64_t>& sizes, int64_t index) {
  int64_t s = 0;
  for (int64_t i = 0; i < index; ++i) s += sizes[i];
  return s;
}

// Merges touching runs; an empty result keeps one empty run at `anchor`
// (PyTorch reports an empty shard at global offset global_shape[d], past any
// real data, whatever placement emptied it).
std::vector<Run> Normalize(std::vector<Run> runs, int64_t anchor) {
  std::vector<Run> out;
  for (const Run& r : runs) {
    if (r.begin == r.end) continue;
    if (!out.empty() && out.back().end == r.begin) {
      out.back().end = r.end;
    } else {
      out.push_back(r);
    }
  }
  if (out.empty()) out.push_back({anchor, anchor});
  return out;
}

Status CheckMesh(const Shape& global_shape, const DeviceMesh& mesh,
                 const std::vector<Placement>& placements) {
  if (mesh.shape.size() != mesh.coordinate.size() || mesh.shape.size() != placements.size()) {
    return InvalidArgumentError("device mesh " + ShapeToString(mesh.shape) + " with coordinate " +
                                ShapeToString(mesh.coordinate) + " and " +
                                std::to_string(placements.size()) + " placements: lengths differ");
  }
  for (size_t i = 0; i < mesh.shape.size(); ++i) {
    const Placement& p = placements[i];
    const std::string where = "mesh dim " + std::to_string(i) + " (" + p.ToString() + ")";
    if (mesh.shape[i] <= 0 || mesh.shape[i] > (int64_t{1} << 30) || mesh.coordinate[i] < 0 ||
        mesh.coordinate[i] >= mesh.shape[i]) {
      return InvalidArgumentError(where + ": coordinate " + std::to_string(mesh.coordinate[i]) +
                                  " is outside a mesh dim of size " +
                                  std::to_string(mesh.shape[i]));
    }
    if (p.kind == Placement::Kind::kReplicate) continue;
    if (p.dim < 0 || static_cast<size_t>(p.dim) >= global_shape.size()) {
      return InvalidArgumentError(where + ": tensor dim is outside shape " +
                                  ShapeToString(global_shape));
    }
    if (p.split_factor < 1) return InvalidArgumentError(where + ": split factor below 1");
  }
  return CheckedNumElements(global_shape).status();
}

}  // namespace

std::string Placement::ToString() const {
  switch (kind) {
    case Kind::kReplicate:
      return "Replicate()";
    case Kind::kShard:
      return "Shard(" + std::to_string(dim) + ")";
    case Kind::kStridedShard:
      return "StridedShard(" + std::to_string(dim) + ", " + std::to_string(split_factor) + ")";
  }
  return "?";
}

Result<std::vector<Box>> DTensorLocalBoxes(const Shape& global_shape, const DeviceMesh& mesh,
                                           const std::vector<Placement>& placements) {
  SP_RETURN_IF_ERROR(CheckMesh(global_shape, mesh, placements));
  std::vector<std::vector<Run>> runs;
  for (int64_t n : global_shape) runs.push_back({{0, n}});
  for (size_t i = 0; i < placements.size(); ++i) {
    const Placement& p = placements[i];
    if (p.kind == Placement::Kind::kReplicate) continue;
    const int m = static_cast<int>(mesh.shape[i]);
    const int64_t c = mesh.coordinate[i];
    std::vector<Run>& cur = runs[p.dim];
    const int64_t len = Length(cur);
    std::vector<Run> next;
    if (p.kind == Placement::Kind::kShard) {
      const std::vector<int64_t> sizes = ChunkSizes(len, m);
      const int64_t a = Before(sizes, c);
      Slice(cur, a, a + sizes[c], &next);
    } else {
      // torch.chunk into split_factor pieces, each into m pieces; keep piece
      // c of each, concatenated (_StridedShard._split_tensor).
      const std::vector<int64_t> outer = ChunkSizes(len, p.split_factor);
      int64_t base = 0;
      for (int64_t piece : outer) {
        const std::vector<int64_t> inner = ChunkSizes(piece, m);
        const int64_t a = base + Before(inner, c);
        Slice(cur, a, a + inner[c], &next);
        base += piece;
      }
    }
    cur = Normalize(std::move(next), global_shape[p.dim]);
  }
  // The product of the runs, row-major in local order.
  std::vector<Box> boxes{Box(Shape{}, Shape{})};
  for (const std::vector<Run>& dim_runs : runs) {
    std::vector<Box> grown;
    for (const Box& b : boxes) {
      for (const Run& r : dim_runs) {
        Box g = b;
        g.offset.push_back(r.begin);
        g.shape.push_back(r.end - r.begin);
        grown.push_back(std::move(g));
      }
    }
    boxes = std::move(grown);
  }
  return boxes;
}

Result<LocalTensor> DTensorShard(std::string key, DType dtype, void* data, Shape global_shape,
                                 const DeviceMesh& mesh, const std::vector<Placement>& placements) {
  Result<std::vector<Box>> boxes = DTensorLocalBoxes(global_shape, mesh, placements);
  if (!boxes.ok()) return boxes.status().WithContext("'" + key + "'");
  LocalTensor t;
  t.dtype = dtype;
  t.data = data;
  t.shape = Shape(global_shape.size(), 0);
  // Local offsets: per dim, the distinct global run starts in order.
  std::vector<std::vector<std::pair<int64_t, int64_t>>> starts(global_shape.size());
  for (const Box& b : *boxes) {
    for (size_t d = 0; d < b.rank(); ++d) {
      auto& s = starts[d];
      if (std::none_of(s.begin(), s.end(), [&](auto& e) { return e.first == b.offset[d]; })) {
        s.push_back({b.offset[d], t.shape[d]});
        t.shape[d] += b.shape[d];
      }
    }
  }
  for (const Box& b : *boxes) {
    Segment seg{key, global_shape, b, Shape(b.rank(), 0)};
    for (size_t d = 0; d < b.rank(); ++d) {
      for (auto& [g, l] : starts[d]) {
        if (g == b.offset[d]) seg.local_offset[d] = l;
      }
    }
    t.segments.push_back(std::move(seg));
  }
  SP_RETURN_IF_ERROR(ValidateLocalTensor(t).WithContext("DTensorShard '" + key + "'"));
  return t;
}

Result<LocalTensor> ShardLocal(LocalTensor local, int dim, int index, int count, void* data) {
  if (local.flat || !local.strides.empty()) {
    return InvalidArgumentError("ShardLocal of a local tensor of shape " +
                                ShapeToString(local.shape) + " that is flat or strided");
  }
  if (dim < 0 || static_cast<size_t>(dim) >= local.shape.size() || count <= 0 || index < 0 ||
      index >= count) {
    return InvalidArgumentError("ShardLocal: dim " + std::to_string(dim) + ", shard " +
                                std::to_string(index) + " of " + std::to_string(count) +
                                " is invalid for local shape " + ShapeToString(local.shape));
  }
  SP_RETURN_IF_ERROR(ValidateLocalTensor(local).WithContext("ShardLocal"));
  const std::vector<int64_t> sizes = ChunkSizes(local.shape[dim], count);
  const int64_t b = Before(sizes, index), s = sizes[index];
  std::vector<Segment> kept;
  for (Segment& seg : local.segments) {
    const size_t lead = seg.local_offset.size() - seg.global_box.rank();
    const int64_t lo = seg.local_offset[dim];
    if (static_cast<size_t>(dim) < lead) {  // a stacking dim of extent 1
      if (lo < b || lo >= b + s) continue;
      seg.local_offset[dim] -= b;
      kept.push_back(std::move(seg));
      continue;
    }
    const size_t g = dim - lead;
    const int64_t hi = lo + seg.global_box.shape[g];
    int64_t new_lo = std::max(lo, b), new_hi = std::min(hi, b + s);
    if (new_hi <= new_lo) {
      // An empty declaration, in the local tensor at the edge of the kept
      // range nearest the segment, and in the global tensor at the start
      // (cut before it) or end (cut after it) of the segment's box.
      new_lo = new_hi = std::clamp(lo, b, b + s);
      seg.global_box.offset[g] += std::clamp<int64_t>(new_lo - lo, 0, seg.global_box.shape[g]);
    } else {
      seg.global_box.offset[g] += new_lo - lo;
    }
    seg.global_box.shape[g] = new_hi - new_lo;
    seg.local_offset[dim] = new_lo - b;
    kept.push_back(std::move(seg));
  }
  local.segments = std::move(kept);
  local.shape[dim] = s;
  local.data = data;
  SP_RETURN_IF_ERROR(ValidateLocalTensor(local).WithContext("ShardLocal"));
  return local;
}

}  // namespace shardpoint
