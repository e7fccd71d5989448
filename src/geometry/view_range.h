// Copies between a contiguous byte run and a flat range of a strided view:
// how staging buffers meet tensors (the writer gathers, the reader scatters).
#pragma once

#include <cstdint>

#include "src/geometry/view.h"

namespace shardpoint::internal_geometry {

// Copies elements [begin, end) of `src` (row-major order over src.shape) to
// contiguous `dst`.
void GatherFlatRange(char* dst, const View& src, int64_t begin, int64_t end);
// Copies contiguous `src` into elements [begin, end) of `dst` (row-major).
void ScatterFlatRange(const View& dst, int64_t begin, int64_t end, const char* src);

}  // namespace shardpoint::internal_geometry
