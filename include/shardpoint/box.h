// Box: an N-d sub-block of a global tensor, as offset and shape.
//
// Indices are int64_t and intervals half-open. A 0-d box (no dims) has one
// element. Boxes are plain values; the free functions are pure and thread-safe.
// Element counts and byte sizes are overflow-checked where they come from
// untrusted input (see CheckedNumElements).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "shardpoint/status.h"

namespace shardpoint {

using Shape = std::vector<int64_t>;

struct Box {
  Shape offset;
  Shape shape;

  Box() = default;
  Box(Shape offset_in, Shape shape_in) : offset(std::move(offset_in)), shape(std::move(shape_in)) {}
  // The whole tensor of `shape`.
  static Box Whole(const Shape& shape) { return Box(Shape(shape.size(), 0), shape); }

  size_t rank() const { return shape.size(); }
  // Product of shape (1 for 0-d). REQUIRES: a validated box (no overflow).
  int64_t num_elements() const;
  bool empty() const { return num_elements() == 0; }
  // "[0:4, 8:16]"
  std::string ToString() const;

  friend bool operator==(const Box& a, const Box& b) {
    return a.offset == b.offset && a.shape == b.shape;
  }
  friend bool operator!=(const Box& a, const Box& b) { return !(a == b); }
  // Lexicographic by offset, then shape: a canonical order.
  friend bool operator<(const Box& a, const Box& b) {
    if (a.offset != b.offset) return a.offset < b.offset;
    return a.shape < b.shape;
  }
};

// Product of `shape`, or InvalidArgument on a negative extent or int64 overflow.
Result<int64_t> CheckedNumElements(const Shape& shape);
// "[4, 8]"
std::string ShapeToString(const Shape& shape);
// The intersection of two boxes of equal rank; nullopt if it is empty.
// (Two boxes that touch only at an edge do not intersect.)
std::optional<Box> Intersect(const Box& a, const Box& b);
// True if `inner` lies entirely inside `outer` (equal rank).
bool Contains(const Box& outer, const Box& inner);
// InvalidArgument unless `box` has rank(shape), non-negative extents, and lies
// within [0, shape) in every dim (without overflow).
Status ValidateBoxInShape(const Box& box, const Shape& shape);

}  // namespace shardpoint
