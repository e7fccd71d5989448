// Fused weights: TP shards of several components concatenated along one dim.
#include <array>
#include <string>
#include <utility>

#include "shardpoint/layout.h"
#include "shardpoint/layout_fused.h"
#include "src/geometry/gqa.h"

namespace shardpoint {

Result<LocalTensor> FusedShard(DType dtype, void* data, const std::vector<FusedPart>& parts,
                               int dim, int tp_rank, int tp_size) {
  if (parts.empty()) return InvalidArgumentError("FusedShard of no parts");
  if (tp_size <= 0 || tp_rank < 0 || tp_rank >= tp_size) {
    return InvalidArgumentError("FusedShard: TP rank " + std::to_string(tp_rank) + " of " +
                                std::to_string(tp_size) + " is out of range");
  }
  LocalTensor t;
  t.dtype = dtype;
  t.data = data;
  for (size_t i = 0; i < parts.size(); ++i) {
    const FusedPart& p = parts[i];
    const std::string what = "fused part " + std::to_string(i) + " '" + p.key + "' of shape " +
                             ShapeToString(p.global_shape);
    if (dim < 0 || static_cast<size_t>(dim) >= p.global_shape.size()) {
      return InvalidArgumentError(what + ": fused dim " + std::to_string(dim) + " is outside it");
    }
    const int64_t n = p.global_shape[dim];
    const int64_t size = p.size < 0 ? n - p.offset : p.size;
    if (p.offset < 0 || size < 0 || p.offset > n || size > n - p.offset) {
      return InvalidArgumentError(what + ": rows [" + std::to_string(p.offset) + ", " +
                                  std::to_string(p.offset + size) + ") are outside dim " +
                                  std::to_string(dim));
    }
    const std::vector<int64_t> sizes = ChunkSizes(size, tp_size);
    int64_t begin = p.offset;
    for (int r = 0; r < tp_rank; ++r) begin += sizes[r];
    Segment seg{p.key, p.global_shape, Box::Whole(p.global_shape), Shape(p.global_shape.size(), 0)};
    seg.global_box.offset[dim] = begin;
    seg.global_box.shape[dim] = sizes[tp_rank];
    if (i == 0) {
      t.shape = p.global_shape;
      t.shape[dim] = 0;
    } else if (p.global_shape.size() != t.shape.size()) {
      return InvalidArgumentError(what + " differs in rank from part 0");
    }
    for (size_t d = 0; d < t.shape.size(); ++d) {
      if (static_cast<int>(d) != dim && p.global_shape[d] != t.shape[d]) {
        return InvalidArgumentError(what + " differs from part 0 outside dim " +
                                    std::to_string(dim));
      }
    }
    seg.local_offset[dim] = t.shape[dim];
    t.shape[dim] += sizes[tp_rank];
    t.segments.push_back(std::move(seg));
  }
  SP_RETURN_IF_ERROR(ValidateLocalTensor(t).WithContext("FusedShard"));
  return t;
}

Result<LocalTensor> SwiGluFc1(const std::string& w_key, const std::string& v_key, DType dtype,
                              void* data, int64_t ffn, Shape trailing, int tp_rank, int tp_size) {
  Shape shape{ffn};
  shape.insert(shape.end(), trailing.begin(), trailing.end());
  if (w_key == v_key) {
    Shape fused = shape;
    fused[0] = 2 * ffn;
    return FusedShard(dtype, data, {{w_key, fused, 0, ffn}, {v_key, fused, ffn, ffn}}, 0, tp_rank,
                      tp_size);
  }
  return FusedShard(dtype, data, {{w_key, shape, 0, -1}, {v_key, shape, 0, -1}}, 0, tp_rank,
                    tp_size);
}

Result<LocalTensor> GqaQkv(const std::string& q_key, const std::string& k_key,
                           const std::string& v_key, DType dtype, void* data, const GqaDims& dims,
                           Shape trailing, int tp_rank, int tp_size) {
  if (dims.groups <= 0 || dims.head_dim <= 0 || dims.heads % dims.groups != 0 || tp_size <= 0 ||
      dims.groups % tp_size != 0 || tp_rank < 0 || tp_rank >= tp_size) {
    return InvalidArgumentError("GqaQkv '" + q_key + "': " + std::to_string(dims.heads) +
                                " heads in " + std::to_string(dims.groups) +
                                " query groups do not split over TP rank " +
                                std::to_string(tp_rank) + " of " + std::to_string(tp_size));
  }
  const int64_t local_groups = dims.groups / tp_size;
  const std::array<int64_t, 3> part_rows =
      internal_geometry::GqaPartRows(dims.heads, dims.groups, dims.head_dim);
  const std::string* keys[3] = {&q_key, &k_key, &v_key};
  auto shape = [&](int64_t rows) {
    Shape s{rows};
    s.insert(s.end(), trailing.begin(), trailing.end());
    return s;
  };
  // The local groups' runs, in fused order.
  std::vector<FusedPart> parts;
  for (int64_t g = tp_rank * local_groups; g < (tp_rank + 1) * local_groups; ++g) {
    for (const internal_geometry::GqaRun& r :
         internal_geometry::GqaGroupRuns(dims.heads, dims.groups, dims.head_dim, g)) {
      parts.push_back({*keys[r.part], shape(part_rows[r.part]), r.src_row, r.rows});
    }
  }
  // Each part is already this rank's: place them without a further TP split.
  return FusedShard(dtype, data, parts, 0, 0, 1);
}

std::vector<int64_t> GdnDims::Components() const {
  const int64_t qk = key_heads * key_dim, v = value_heads * value_dim;
  return {qk, qk, v, v, value_heads, value_heads};
}

namespace {

Result<LocalTensor> GdnFused(const std::string& key, DType dtype, void* data,
                             std::vector<int64_t> components, Shape trailing, int tp_rank,
                             int tp_size) {
  int64_t total = 0;
  for (int64_t c : components) total += c;
  Shape shape{total};
  shape.insert(shape.end(), trailing.begin(), trailing.end());
  std::vector<FusedPart> parts;
  int64_t offset = 0;
  for (int64_t c : components) {
    parts.push_back({key, shape, offset, c});
    offset += c;
  }
  return FusedShard(dtype, data, parts, 0, tp_rank, tp_size);
}

}  // namespace

Result<LocalTensor> GdnInProj(const std::string& key, DType dtype, void* data, const GdnDims& dims,
                              int64_t hidden, int tp_rank, int tp_size) {
  return GdnFused(key, dtype, data, dims.Components(), {hidden}, tp_rank, tp_size);
}

Result<LocalTensor> GdnConv1d(const std::string& key, DType dtype, void* data, const GdnDims& dims,
                              Shape trailing, int tp_rank, int tp_size) {
  std::vector<int64_t> c = dims.Components();
  c.resize(3);  // q, k, v
  return GdnFused(key, dtype, data, std::move(c), std::move(trailing), tp_rank, tp_size);
}

}  // namespace shardpoint
