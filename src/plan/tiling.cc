#include "src/plan/tiling.h"

#include <algorithm>
#include <numeric>

#include "src/base/checked.h"
#include "src/geometry/flat_range.h"

using shardpoint::internal_base::CheckedAdd;
using shardpoint::internal_geometry::RowMajorIndex;
using shardpoint::internal_geometry::UnravelIndex;

namespace shardpoint::internal_plan {
namespace {

std::string Describe(const std::vector<Box>& boxes, size_t i, const DescribeHolder& who) {
  return "box " + boxes[i].ToString() + " (" + who(i) + ")";
}

// Sweeps along the dim with the most distinct start offsets: boxes are
// sorted by their start there, and each box is compared only with the boxes
// still open at its start. For the layouts of the field (grids, flat-range
// slabs) few boxes are open at once, so this is near-linear.
Status CheckDisjoint(const std::string& key, const std::vector<Box>& boxes,
                     const DescribeHolder& who) {
  const size_t rank = boxes[0].rank();
  size_t dim = 0, best = 0;
  for (size_t d = 0; d < rank; ++d) {
    std::vector<int64_t> starts;
    starts.reserve(boxes.size());
    for (const Box& b : boxes) starts.push_back(b.offset[d]);
    std::sort(starts.begin(), starts.end());
    size_t distinct = std::unique(starts.begin(), starts.end()) - starts.begin();
    if (distinct > best) best = distinct, dim = d;
  }
  std::vector<size_t> order(boxes.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return boxes[a].offset[dim] < boxes[b].offset[dim]; });
  std::vector<size_t> open;
  for (size_t i : order) {
    const Box& b = boxes[i];
    std::erase_if(open, [&](size_t j) {
      return boxes[j].offset[dim] + boxes[j].shape[dim] <= b.offset[dim];
    });
    for (size_t j : open) {
      if (Intersect(boxes[j], b)) {
        return InvalidArgumentError("tensor '" + key + "': " + Describe(boxes, j, who) +
                                    " partially overlaps " + Describe(boxes, i, who));
      }
    }
    open.push_back(i);
  }
  return OkStatus();
}

// Only on the error path: the first element no box covers.
std::string FirstUncovered(const Shape& shape, const std::vector<Box>& boxes) {
  int64_t n = Box::Whole(shape).num_elements();
  if (n > (int64_t{1} << 22)) return "";
  std::vector<bool> covered(n, false);
  for (const Box& b : boxes) {
    int64_t m = b.num_elements();
    for (int64_t i = 0; i < m; ++i) {
      Shape idx = UnravelIndex(b.shape, i);
      for (size_t d = 0; d < idx.size(); ++d) idx[d] += b.offset[d];
      covered[RowMajorIndex(shape, idx)] = true;
    }
  }
  for (int64_t i = 0; i < n; ++i) {
    if (!covered[i]) return "; element " + ShapeToString(UnravelIndex(shape, i)) + " is missing";
  }
  return "";
}

}  // namespace

std::string RanksToString(const std::vector<int>& ranks) {
  std::string s = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size() && i < 8; ++i) {
    if (i) s += ", ";
    s += std::to_string(ranks[i]);
  }
  if (ranks.size() > 8) s += ", ... (" + std::to_string(ranks.size()) + " in all)";
  return s;
}

Status CheckTiling(const std::string& key, const Shape& shape, const std::vector<Box>& boxes,
                   const DescribeHolder& describe) {
  const int64_t total = Box::Whole(shape).num_elements();
  int64_t covered = 0;
  for (const Box& b : boxes) {
    std::optional<int64_t> sum = CheckedAdd(covered, b.num_elements());
    if (!sum) return InvalidArgumentError("tensor '" + key + "': boxes overflow the element count");
    covered = *sum;
  }
  if (!boxes.empty()) SP_RETURN_IF_ERROR(CheckDisjoint(key, boxes, describe));
  if (covered != total) {
    return InvalidArgumentError("tensor '" + key + "' of shape " + ShapeToString(shape) +
                                " is not fully covered: its boxes hold " + std::to_string(covered) +
                                " of " + std::to_string(total) + " elements" +
                                FirstUncovered(shape, boxes));
  }
  return OkStatus();
}

}  // namespace shardpoint::internal_plan
