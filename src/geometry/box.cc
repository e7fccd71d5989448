#include "shardpoint/box.h"

#include <algorithm>

#include "src/base/checked.h"

using shardpoint::internal_base::CheckedAdd;
using shardpoint::internal_base::CheckedMul;

namespace shardpoint {

using internal_base::CheckedAdd;
using internal_base::CheckedMul;

int64_t Box::num_elements() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

std::string ShapeToString(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

std::string Box::ToString() const {
  if (offset.size() != shape.size()) {  // untrusted boxes reach error messages
    std::string s = "offset [";
    for (size_t i = 0; i < offset.size(); ++i) s += (i ? ", " : "") + std::to_string(offset[i]);
    s += "] shape [";
    for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + "]";
  }
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    // Error messages print untrusted boxes, so the end is overflow-checked.
    std::optional<int64_t> end = CheckedAdd(offset[i], shape[i]);
    s += std::to_string(offset[i]) + ":" +
         (end ? std::to_string(*end)
              : "(" + std::to_string(offset[i]) + "+" + std::to_string(shape[i]) + ")");
  }
  return s + "]";
}

Result<int64_t> CheckedNumElements(const Shape& shape) {
  int64_t n = 1;
  for (int64_t s : shape) {
    if (s < 0) return InvalidArgumentError("negative extent in shape " + ShapeToString(shape));
    std::optional<int64_t> product = CheckedMul(n, s);
    if (!product) {
      return InvalidArgumentError("element count of shape " + ShapeToString(shape) +
                                  " overflows int64");
    }
    n = *product;
  }
  return n;
}

std::optional<Box> Intersect(const Box& a, const Box& b) {
  Box out;
  out.offset.resize(a.rank());
  out.shape.resize(a.rank());
  for (size_t d = 0; d < a.rank(); ++d) {
    int64_t lo = std::max(a.offset[d], b.offset[d]);
    int64_t hi = std::min(a.offset[d] + a.shape[d], b.offset[d] + b.shape[d]);
    if (hi <= lo) return std::nullopt;
    out.offset[d] = lo;
    out.shape[d] = hi - lo;
  }
  return out;
}

bool Contains(const Box& outer, const Box& inner) {
  for (size_t d = 0; d < outer.rank(); ++d) {
    if (inner.offset[d] < outer.offset[d] ||
        inner.offset[d] + inner.shape[d] > outer.offset[d] + outer.shape[d]) {
      return false;
    }
  }
  return true;
}

Status ValidateBoxInShape(const Box& box, const Shape& shape) {
  if (box.offset.size() != shape.size() || box.shape.size() != shape.size()) {
    return InvalidArgumentError("box " + box.ToString() + " has rank " +
                                std::to_string(box.shape.size()) + ", tensor shape " +
                                ShapeToString(shape) + " has rank " + std::to_string(shape.size()));
  }
  for (size_t d = 0; d < shape.size(); ++d) {
    std::optional<int64_t> end = CheckedAdd(box.offset[d], box.shape[d]);
    if (box.offset[d] < 0 || box.shape[d] < 0 || !end || *end > shape[d]) {
      return InvalidArgumentError("box " + box.ToString() + " lies outside shape " +
                                  ShapeToString(shape) + " in dim " + std::to_string(d));
    }
  }
  // Each extent fits its dim, but their product may still overflow.
  return CheckedNumElements(box.shape).status();
}

}  // namespace shardpoint
