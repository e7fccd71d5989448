#include "src/geometry/view_range.h"

#include <cstring>

#include "src/base/stream_copy.h"
#include "src/geometry/flat_range.h"

namespace shardpoint::internal_geometry {
namespace {

// The flat range [begin, end) of `v` as at most 2*ndim-1 sub-views, each
// paired with its position in the contiguous run.
template <typename Fn>
void ForEachPiece(const View& v, int64_t begin, int64_t end, Fn fn) {
  if (begin == 0 && end == v.num_elements()) {
    fn(v, 0);
    return;
  }
  int64_t pos = 0;
  for (const Box& b : FlatRangeToBoxes(v.shape, begin, end)) {
    fn(v.Sub(b), pos);
    pos += b.num_elements();
  }
}

}  // namespace

// A row-major contiguous view holds its flat range [begin, end) as one run
// of memory: one copy, no sub-views.
void GatherFlatRange(char* dst, const View& src, int64_t begin, int64_t end) {
  if (src.IsContiguous()) {
    if (end > begin)
      std::memcpy(dst, src.data + begin * src.elem_size, (end - begin) * src.elem_size);
    return;
  }
  ForEachPiece(src, begin, end, [&](const View& piece, int64_t pos) {
    StridedCopy(ContiguousView(dst + pos * src.elem_size, src.elem_size, piece.shape), piece);
  });
}

// Into a contiguous destination: one copy past the caches where it is large
// (a loaded tensor is not read again soon; internal_base::StreamCopy).
void ScatterFlatRange(const View& dst, int64_t begin, int64_t end, const char* src) {
  if (dst.IsContiguous()) {
    if (end > begin) {
      internal_base::StreamCopy(dst.data + begin * dst.elem_size, src,
                                (end - begin) * dst.elem_size);
    }
    return;
  }
  ForEachPiece(dst, begin, end, [&](const View& piece, int64_t pos) {
    StridedCopy(piece, ContiguousView(const_cast<char*>(src) + pos * dst.elem_size, dst.elem_size,
                                      piece.shape));
  });
}

}  // namespace shardpoint::internal_geometry
