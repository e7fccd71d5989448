// The basic layout builders: whole tensors, even and uneven splits along one
// dim, flat shards and concatenation (fused weights).
#include <algorithm>
#include <string>
#include <utility>

#include "shardpoint/layout.h"
#include "src/base/checked.h"

namespace shardpoint {
namespace {

Status CheckDim(const std::string& key, const Shape& shape, int dim) {
  if (dim < 0 || static_cast<size_t>(dim) >= shape.size()) {
    return InvalidArgumentError("'" + key + "': split dim " + std::to_string(dim) +
                                " is outside shape " + ShapeToString(shape));
  }
  return OkStatus();
}

// Shard of rows [begin, begin + size) of `dim`. REQUIRES: inside the shape.
LocalTensor RowShard(std::string key, DType dtype, void* data, Shape global_shape, int dim,
                     int64_t begin, int64_t size) {
  Segment seg;
  seg.key = std::move(key);
  seg.global_box = Box::Whole(global_shape);
  seg.global_box.offset[dim] = begin;
  seg.global_box.shape[dim] = size;
  seg.local_offset = Shape(global_shape.size(), 0);
  seg.global_shape = std::move(global_shape);
  LocalTensor t;
  t.dtype = dtype;
  t.data = data;
  t.shape = seg.global_box.shape;
  t.segments.push_back(std::move(seg));
  return t;
}

}  // namespace

std::vector<int64_t> ChunkSizes(int64_t n, int count) {
  if (n < 0 || count <= 0) return {};
  const int64_t c = n / count + (n % count != 0);
  std::vector<int64_t> sizes(count);
  for (int i = 0; i < count; ++i) {
    const int64_t begin = std::min(n, i * c);
    sizes[i] = std::min(n, begin + c) - begin;
  }
  return sizes;
}

LocalTensor WholeTensor(std::string key, DType dtype, void* data, Shape shape) {
  Segment seg;
  seg.key = std::move(key);
  seg.global_box = Box::Whole(shape);
  seg.local_offset = Shape(shape.size(), 0);
  seg.global_shape = shape;
  LocalTensor t;
  t.dtype = dtype;
  t.data = data;
  t.shape = std::move(shape);
  t.segments.push_back(std::move(seg));
  return t;
}

Result<LocalTensor> SplitTensor(std::string key, DType dtype, void* data, Shape global_shape,
                                int dim, int index, int count) {
  SP_RETURN_IF_ERROR(CheckDim(key, global_shape, dim));
  if (count <= 0 || index < 0 || index >= count) {
    return InvalidArgumentError("'" + key + "': shard index " + std::to_string(index) + " of " +
                                std::to_string(count) + " is out of range");
  }
  std::vector<int64_t> sizes = ChunkSizes(global_shape[dim], count);
  return SplitTensorSizes(std::move(key), dtype, data, std::move(global_shape), dim,
                          std::move(sizes), index);
}

Result<LocalTensor> SplitTensorSizes(std::string key, DType dtype, void* data, Shape global_shape,
                                     int dim, std::vector<int64_t> sizes, int index) {
  SP_RETURN_IF_ERROR(CheckDim(key, global_shape, dim));
  if (Result<int64_t> n = CheckedNumElements(global_shape); !n.ok()) {
    return n.status().WithContext("'" + key + "'");
  }
  if (index < 0 || static_cast<size_t>(index) >= sizes.size()) {
    return InvalidArgumentError("'" + key + "': shard index " + std::to_string(index) + " of " +
                                std::to_string(sizes.size()) + " is out of range");
  }
  int64_t total = 0, begin = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    std::optional<int64_t> sum = internal_base::CheckedAdd(total, sizes[i]);
    if (sizes[i] < 0 || !sum) {
      return InvalidArgumentError("'" + key + "': split sizes " + ShapeToString(sizes) +
                                  " contain a negative size or overflow");
    }
    total = *sum;
    if (static_cast<int>(i) + 1 == index) begin = total;
  }
  if (total != global_shape[dim]) {
    return InvalidArgumentError("'" + key + "': split sizes " + ShapeToString(sizes) + " sum to " +
                                std::to_string(total) + ", not dim " + std::to_string(dim) +
                                " of shape " + ShapeToString(global_shape));
  }
  return RowShard(std::move(key), dtype, data, std::move(global_shape), dim, begin, sizes[index]);
}

Result<LocalTensor> FlatShard(LocalTensor full_layout, FlatRange range, void* data) {
  if (full_layout.flat || !full_layout.strides.empty()) {
    return InvalidArgumentError("FlatShard of a local tensor of shape " +
                                ShapeToString(full_layout.shape) +
                                " that is already flat or strided");
  }
  full_layout.flat = range;
  full_layout.data = data;
  SP_RETURN_IF_ERROR(ValidateLocalTensor(full_layout).WithContext("FlatShard"));
  return full_layout;
}

Result<LocalTensor> Concat(std::vector<LocalTensor> parts, int dim, void* data) {
  if (parts.empty()) return InvalidArgumentError("Concat of no local tensors");
  LocalTensor out;
  out.dtype = parts[0].dtype;
  out.data = data;
  out.shape = parts[0].shape;
  if (dim < 0 || static_cast<size_t>(dim) >= out.shape.size()) {
    return InvalidArgumentError("Concat dim " + std::to_string(dim) + " is outside shape " +
                                ShapeToString(out.shape));
  }
  out.shape[dim] = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    LocalTensor& p = parts[i];
    const std::string what =
        "Concat part " + std::to_string(i) + " of shape " + ShapeToString(p.shape);
    if (p.flat || !p.strides.empty()) {
      return InvalidArgumentError(what + " is flat or strided");
    }
    if (p.dtype != out.dtype || p.shape.size() != out.shape.size()) {
      return InvalidArgumentError(what + " differs in dtype or rank from part 0 of shape " +
                                  ShapeToString(parts[0].shape));
    }
    for (size_t d = 0; d < p.shape.size(); ++d) {
      if (static_cast<int>(d) != dim && p.shape[d] != out.shape[d]) {
        return InvalidArgumentError(what + " differs from part 0 of shape " +
                                    ShapeToString(parts[0].shape) + " outside dim " +
                                    std::to_string(dim));
      }
    }
    SP_RETURN_IF_ERROR(ValidateLocalTensor(p).WithContext(what));
    for (Segment& s : p.segments) {
      s.local_offset[dim] += out.shape[dim];
      out.segments.push_back(std::move(s));
    }
    std::optional<int64_t> extent = internal_base::CheckedAdd(out.shape[dim], p.shape[dim]);
    if (!extent) return InvalidArgumentError(what + ": concatenated size overflows");
    out.shape[dim] = *extent;
  }
  SP_RETURN_IF_ERROR(ValidateLocalTensor(out).WithContext("Concat"));
  return out;
}

}  // namespace shardpoint
