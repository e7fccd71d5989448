// One innermost run of a strided copy: `count` elements of `elem_size` bytes,
// source and destination each a fixed byte stride apart. The hot loop of
// StridedCopy and of the strided DCP reader.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace shardpoint::internal_geometry {

// Copies `count` elements from a strided run to a strided run.
template <typename T>
inline void CopyTyped(char* dst, int64_t dst_stride, const char* src, int64_t src_stride,
                      int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    T v;
    std::memcpy(&v, src, sizeof(T));  // unaligned-safe; compiles to a plain load
    std::memcpy(dst, &v, sizeof(T));
    dst += dst_stride;
    src += src_stride;
  }
}

// One innermost run: contiguous in both (one memcpy), or strided (a typed
// loop for the common element sizes, so no memcpy call per element).
inline void CopyRun(char* dst, int64_t dst_stride, const char* src, int64_t src_stride,
                    int64_t count, size_t elem_size, bool contiguous) {
  if (contiguous) {
    std::memcpy(dst, src, static_cast<size_t>(count) * elem_size);
    return;
  }
  switch (elem_size) {
    case 1:
      return CopyTyped<uint8_t>(dst, dst_stride, src, src_stride, count);
    case 2:
      return CopyTyped<uint16_t>(dst, dst_stride, src, src_stride, count);
    case 4:
      return CopyTyped<uint32_t>(dst, dst_stride, src, src_stride, count);
    case 8:
      return CopyTyped<uint64_t>(dst, dst_stride, src, src_stride, count);
    default:
      for (int64_t i = 0; i < count; ++i) {
        std::memcpy(dst, src, elem_size);
        dst += dst_stride;
        src += src_stride;
      }
  }
}

}  // namespace shardpoint::internal_geometry
