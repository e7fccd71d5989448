// Strided views and StridedCopy, the loop every saved and loaded byte goes
// through.
//
// StridedCopy first simplifies the pair of views: dims of extent 1 are
// dropped, and adjacent dims that are contiguous in *both* views are merged.
// A row-major tensor copied into a column slice of another becomes one outer
// dim plus one contiguous run, so the work is one memcpy per run. The outer
// dims are walked with an odometer (no recursion, no per-element division).
// When the innermost dim is not contiguous in both views, a typed
// element-by-element loop for the common element sizes avoids a memcpy call
// per element.
#include "src/geometry/view.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "src/geometry/copy_run.h"

namespace shardpoint::internal_geometry {
namespace {

// Dims after simplification. Stack storage for ordinary ranks; a heap
// fallback keeps absurd ranks correct.
constexpr size_t kInlineDims = 16;
// Elements per strip of a strided inner dim (see StridedCopy).
constexpr int64_t kStrip = 16;

struct Dims {
  int64_t inline_buf[3 * kInlineDims];
  std::vector<int64_t> heap;
  int64_t* extent;
  int64_t* dst_stride;
  int64_t* src_stride;
  size_t n = 0;

  explicit Dims(size_t capacity) {
    int64_t* buf = inline_buf;
    if (capacity > kInlineDims) {
      heap.resize(3 * capacity);
      buf = heap.data();
    }
    extent = buf;
    dst_stride = buf + capacity;
    src_stride = buf + 2 * capacity;
  }
};

}  // namespace

int64_t View::num_elements() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

bool View::IsContiguous() const {
  int64_t expected = static_cast<int64_t>(elem_size);
  bool empty = false;
  bool contiguous = true;
  for (size_t d = shape.size(); d-- > 0;) {
    if (shape[d] == 0) empty = true;
    // A dim of extent 1 is never stepped over, so its stride does not matter.
    if (shape[d] != 1 && byte_strides[d] != expected) contiguous = false;
    expected *= shape[d];
  }
  return contiguous || empty;
}

View View::Sub(const Box& box) const {
  View v;
  v.data = data;
  for (size_t d = 0; d < box.rank(); ++d) v.data += box.offset[d] * byte_strides[d];
  v.elem_size = elem_size;
  v.shape = box.shape;
  v.byte_strides = byte_strides;
  return v;
}

View ContiguousView(void* data, size_t elem_size, const Shape& shape) {
  View v;
  v.data = static_cast<char*>(data);
  v.elem_size = elem_size;
  v.shape = shape;
  v.byte_strides.resize(shape.size());
  int64_t s = static_cast<int64_t>(elem_size);
  for (size_t d = shape.size(); d-- > 0;) {
    v.byte_strides[d] = s;
    s *= shape[d];
  }
  return v;
}

void StridedCopy(const View& dst, const View& src) {
  const size_t rank = src.shape.size();
  const int64_t elem = static_cast<int64_t>(src.elem_size);

  // Simplify, innermost first: drop extent-1 dims, merge a dim into the one
  // inside it when both views step over the inner dim exactly.
  Dims dims(rank + 1);
  for (size_t d = rank; d-- > 0;) {
    const int64_t e = src.shape[d];
    if (e == 0) return;
    if (e == 1) continue;
    const int64_t ds = dst.byte_strides[d], ss = src.byte_strides[d];
    if (dims.n > 0) {
      const size_t i = dims.n - 1;
      if (ds == dims.dst_stride[i] * dims.extent[i] && ss == dims.src_stride[i] * dims.extent[i]) {
        dims.extent[i] *= e;
        continue;
      }
    }
    dims.extent[dims.n] = e;
    dims.dst_stride[dims.n] = ds;
    dims.src_stride[dims.n] = ss;
    ++dims.n;
  }
  if (dims.n == 0) {  // one element (0-d or all extents 1)
    std::memcpy(dst.data, src.data, src.elem_size);
    return;
  }
  // dims[0] is now the innermost dim, dims[n-1] the outermost.
  const int64_t inner = dims.extent[0];
  const int64_t inner_ds = dims.dst_stride[0], inner_ss = dims.src_stride[0];
  const bool contiguous = inner_ds == elem && inner_ss == elem;
  if (dims.n == 1) {
    CopyRun(dst.data, inner_ds, src.data, inner_ss, inner, src.elem_size, contiguous);
    return;
  }

  // dims[1] is walked by a plain loop, dims[2..n) by the odometer.
  const int64_t mid = dims.extent[1];
  const int64_t mid_ds = dims.dst_stride[1], mid_ss = dims.src_stride[1];
  const size_t outer_dims = dims.n - 2;
  int64_t counter_inline[kInlineDims] = {};
  std::vector<int64_t> counter_heap;
  int64_t* counter = counter_inline;
  if (outer_dims > kInlineDims) {
    counter_heap.assign(outer_dims, 0);
    counter = counter_heap.data();
  }
  // A strided inner dim (e.g. a transposed view) is strip-mined: a strip of
  // kStrip inner elements is copied for every mid index before the next strip,
  // so the cache lines the strided side touches are reused across mid instead
  // of being evicted after one element each.
  const int64_t strip = contiguous ? inner : kStrip;
  char* d = dst.data;
  const char* s = src.data;
  while (true) {
    for (int64_t i0 = 0; i0 < inner; i0 += strip) {
      const int64_t count = std::min(strip, inner - i0);
      char* dd = d + i0 * inner_ds;
      const char* ss = s + i0 * inner_ss;
      for (int64_t j = 0; j < mid; ++j) {
        CopyRun(dd, inner_ds, ss, inner_ss, count, src.elem_size, contiguous);
        dd += mid_ds;
        ss += mid_ss;
      }
    }
    // Advance the odometer over dims[2..n); done when it wraps entirely.
    size_t k = 0;
    for (; k < outer_dims; ++k) {
      const size_t i = k + 2;
      d += dims.dst_stride[i];
      s += dims.src_stride[i];
      if (++counter[k] < dims.extent[i]) break;
      counter[k] = 0;
      d -= dims.dst_stride[i] * dims.extent[i];
      s -= dims.src_stride[i] * dims.extent[i];
    }
    if (k == outer_dims) return;
  }
}

}  // namespace shardpoint::internal_geometry
