// Element-wise dtype conversion (for loads with allow_dtype_conversion).
#pragma once

#include <cstdint>

#include "shardpoint/dtype.h"
#include "shardpoint/status.h"

namespace shardpoint::internal_geometry {

// Converts n contiguous elements. Floats round to nearest even; out-of-range
// values saturate for f8_e4m3 (max 448) and become inf for other floats; NaN
// stays NaN. Integer <- float truncates toward zero and saturates. bool is
// 0/1. Same dtype is a memcpy. REQUIRES: dst and src do not overlap.
void ConvertElements(DType from, const void* src, DType to, void* dst, int64_t n);

}  // namespace shardpoint::internal_geometry
