// Strided views of memory and the copy between them (the hot loop).
#pragma once

#include <cstddef>
#include <cstdint>

#include "shardpoint/box.h"

namespace shardpoint::internal_geometry {

// A strided view: `shape` elements of `elem_size` bytes at `data`, with byte
// strides per dim. Non-owning. A 0-d view is one element.
struct View {
  char* data = nullptr;
  size_t elem_size = 1;
  Shape shape;
  Shape byte_strides;

  int64_t num_elements() const;
  // True if the elements are contiguous in row-major order.
  bool IsContiguous() const;
  // The sub-view of `box` (relative to this view's origin). REQUIRES: inside.
  View Sub(const Box& box) const;
};

// A row-major contiguous view of `shape` at `data`.
View ContiguousView(void* data, size_t elem_size, const Shape& shape);

// Copies src into dst element by element. REQUIRES: equal shapes and element
// sizes, no overlap. Adjacent dims that are contiguous in both views are
// merged and the innermost contiguous run is copied with memcpy.
void StridedCopy(const View& dst, const View& src);

}  // namespace shardpoint::internal_geometry
