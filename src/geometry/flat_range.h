// Flat ranges of row-major tensors and their decomposition into boxes.
#pragma once

#include <cstdint>
#include <vector>

#include "shardpoint/box.h"

namespace shardpoint::internal_geometry {

// Row-major element strides of `shape` (last dim stride 1).
Shape RowMajorStrides(const Shape& shape);
// Row-major linear index of `index` in `shape`.
int64_t RowMajorIndex(const Shape& shape, const Shape& index);
// The multi-index of row-major linear index `linear` in `shape`.
Shape UnravelIndex(const Shape& shape, int64_t linear);

// Splits the row-major flat range [begin, end) of a tensor of `shape` into at
// most 2*ndim-1 boxes (1 for 0-d), in row-major order, covering it exactly.
// Empty range -> no boxes. REQUIRES: 0 <= begin <= end <= num_elements(shape).
std::vector<Box> FlatRangeToBoxes(const Shape& shape, int64_t begin, int64_t end);

}  // namespace shardpoint::internal_geometry
