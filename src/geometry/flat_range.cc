// Row-major index arithmetic and the flat-range -> boxes decomposition.
//
// A flat range [begin, end) of a row-major tensor is split along dim 0 into a
// partial first slice, a block of whole slices and a partial last slice; the
// partial slices recurse into the remaining dims. A partial first slice that
// ends at a slice boundary is a suffix range, whose recursion never produces a
// partial first part again (and a prefix range never a partial last part), so
// each side contributes at most ndim-1 boxes: 2*ndim-1 in all.
#include "src/geometry/flat_range.h"

#include <algorithm>

namespace shardpoint::internal_geometry {
namespace {

// Appends the boxes of [begin, end) within the trailing dims shape[dim..],
// prefixed by `prefix` (offsets of the leading dims, each of extent 1).
// REQUIRES: 0 <= begin < end <= num_elements(shape[dim..]).
void AppendBoxes(const Shape& shape, size_t dim, Shape& prefix, int64_t begin, int64_t end,
                 std::vector<Box>& out) {
  const size_t ndim = shape.size();
  auto emit = [&](int64_t first, int64_t count) {
    Box box;
    box.offset = prefix;
    box.offset.push_back(first);
    box.shape.assign(prefix.size(), 1);
    box.shape.push_back(count);
    for (size_t d = dim + 1; d < ndim; ++d) {
      box.offset.push_back(0);
      box.shape.push_back(shape[d]);
    }
    out.push_back(std::move(box));
  };
  if (dim + 1 == ndim) {  // the last dim: a range of it is one box
    emit(begin, end - begin);
    return;
  }
  int64_t slice = 1;  // elements per index of `dim`; > 0 since the range is non-empty
  for (size_t d = dim + 1; d < ndim; ++d) slice *= shape[d];
  int64_t first = begin / slice;
  const int64_t last = end / slice;  // the slice holding `end`, if end is not on a boundary
  if (begin % slice != 0) {
    const int64_t stop = std::min(end - first * slice, slice);
    prefix.push_back(first);
    AppendBoxes(shape, dim + 1, prefix, begin % slice, stop, out);
    prefix.pop_back();
    ++first;
    if (end <= first * slice) return;
  }
  if (last > first) emit(first, last - first);
  if (end % slice != 0) {
    prefix.push_back(last);
    AppendBoxes(shape, dim + 1, prefix, 0, end % slice, out);
    prefix.pop_back();
  }
}

}  // namespace

Shape RowMajorStrides(const Shape& shape) {
  Shape strides(shape.size());
  int64_t s = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    strides[d] = s;
    s *= shape[d];
  }
  return strides;
}

int64_t RowMajorIndex(const Shape& shape, const Shape& index) {
  int64_t linear = 0;
  for (size_t d = 0; d < shape.size(); ++d) linear = linear * shape[d] + index[d];
  return linear;
}

Shape UnravelIndex(const Shape& shape, int64_t linear) {
  Shape index(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    if (shape[d] == 0) return index;  // no element exists; avoid dividing by zero
    index[d] = linear % shape[d];
    linear /= shape[d];
  }
  return index;
}

std::vector<Box> FlatRangeToBoxes(const Shape& shape, int64_t begin, int64_t end) {
  std::vector<Box> out;
  if (begin >= end) return out;
  if (shape.empty()) {  // a 0-d tensor: its one element
    out.emplace_back();
    return out;
  }
  Shape prefix;
  prefix.reserve(shape.size());
  AppendBoxes(shape, 0, prefix, begin, end, out);
  return out;
}

}  // namespace shardpoint::internal_geometry
