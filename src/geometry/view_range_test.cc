#include "src/geometry/view_range.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "src/geometry/flat_range.h"

namespace shardpoint::internal_geometry {
namespace {

// The byte offset of row-major element `flat` of `v` from v.data.
int64_t OffsetOf(const View& v, int64_t flat) {
  const Shape idx = UnravelIndex(v.shape, flat);
  int64_t at = 0;
  for (size_t d = 0; d < idx.size(); ++d) at += idx[d] * v.byte_strides[d];
  return at;
}

// Gather and scatter of random flat ranges, of whole contiguous views (one
// copy) and of strided sub-views (cut into pieces), element by element
// against the strides.
TEST(ViewRangeTest, GatherAndScatterAnyRangeOfContiguousAndStridedViews) {
  std::mt19937_64 rng(5);
  for (int trial = 0; trial < 300; ++trial) {
    const size_t ndim = rng() % 4;
    const size_t es = size_t{1} << (rng() % 4);
    Shape shape(ndim), sub_off(ndim), sub_shape(ndim);
    for (size_t d = 0; d < ndim; ++d) {
      shape[d] = 1 + static_cast<int64_t>(rng() % 6);
      sub_off[d] = static_cast<int64_t>(rng() % shape[d]);
      sub_shape[d] = 1 + static_cast<int64_t>(rng() % (shape[d] - sub_off[d]));
    }
    std::vector<char> mem(static_cast<size_t>(Box::Whole(shape).num_elements()) * es);
    for (char& c : mem) c = static_cast<char>(rng());
    const View whole = ContiguousView(mem.data(), es, shape);
    for (const View& v : {whole, whole.Sub(Box(sub_off, sub_shape))}) {
      const int64_t n = v.num_elements();
      const int64_t begin = static_cast<int64_t>(rng() % (n + 1));
      const int64_t end = begin + static_cast<int64_t>(rng() % (n - begin + 1));
      std::vector<char> got((end - begin) * es + 1, '\x5a');
      GatherFlatRange(got.data(), v, begin, end);
      for (int64_t f = begin; f < end; ++f) {
        ASSERT_EQ(std::memcmp(got.data() + (f - begin) * es, v.data + OffsetOf(v, f), es), 0)
            << "trial " << trial << " element " << f;
      }
      ASSERT_EQ(got.back(), '\x5a') << "wrote past the range";
      std::vector<char> src((end - begin) * es);
      for (char& c : src) c = static_cast<char>(rng());
      const std::vector<char> before = mem;
      ScatterFlatRange(v, begin, end, src.data());
      std::vector<char> want = before;
      for (int64_t f = begin; f < end; ++f) {
        std::memcpy(want.data() + (v.data - mem.data()) + OffsetOf(v, f),
                    src.data() + (f - begin) * es, es);
      }
      ASSERT_EQ(mem, want) << "trial " << trial;
    }
  }
}

}  // namespace
}  // namespace shardpoint::internal_geometry
