#include "src/geometry/flat_range.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace shardpoint::internal_geometry {
namespace {

TEST(RowMajorTest, StridesIndexUnravel) {
  EXPECT_EQ(RowMajorStrides({2, 3, 4}), (Shape{12, 4, 1}));
  EXPECT_EQ(RowMajorStrides({}), Shape{});
  EXPECT_EQ(RowMajorIndex({2, 3, 4}, {1, 2, 3}), 23);
  EXPECT_EQ(RowMajorIndex({}, {}), 0);
  EXPECT_EQ(UnravelIndex({2, 3, 4}, 23), (Shape{1, 2, 3}));
  EXPECT_EQ(UnravelIndex({2, 3, 4}, 0), (Shape{0, 0, 0}));
  for (int64_t i = 0; i < 24; ++i)
    EXPECT_EQ(RowMajorIndex({2, 3, 4}, UnravelIndex({2, 3, 4}, i)), i);
}

TEST(FlatRangeToBoxesTest, ZeroDAndEmpty) {
  EXPECT_EQ(FlatRangeToBoxes({}, 0, 1), (std::vector<Box>{Box()}));
  EXPECT_TRUE(FlatRangeToBoxes({}, 0, 0).empty());
  EXPECT_TRUE(FlatRangeToBoxes({4, 5}, 7, 7).empty());
  EXPECT_TRUE(FlatRangeToBoxes({0, 5}, 0, 0).empty());
}

TEST(FlatRangeToBoxesTest, HandExamples) {
  // Whole tensor: one box.
  EXPECT_EQ(FlatRangeToBoxes({4, 5}, 0, 20), (std::vector<Box>{Box({0, 0}, {4, 5})}));
  // Partial first row, full middle rows, partial last row.
  EXPECT_EQ(FlatRangeToBoxes({4, 5}, 3, 17),
            (std::vector<Box>{Box({0, 3}, {1, 2}), Box({1, 0}, {2, 5}), Box({3, 0}, {1, 2})}));
  // Inside one row.
  EXPECT_EQ(FlatRangeToBoxes({4, 5}, 6, 8), (std::vector<Box>{Box({1, 1}, {1, 2})}));
  // 1-d.
  EXPECT_EQ(FlatRangeToBoxes({10}, 2, 9), (std::vector<Box>{Box({2}, {7})}));
  // 3-d, worst case of 5 boxes.
  EXPECT_EQ(FlatRangeToBoxes({3, 2, 2}, 1, 11),
            (std::vector<Box>{Box({0, 0, 1}, {1, 1, 1}), Box({0, 1, 0}, {1, 1, 2}),
                              Box({1, 0, 0}, {1, 2, 2}), Box({2, 0, 0}, {1, 1, 2}),
                              Box({2, 1, 0}, {1, 1, 1})}));
}

// Enumerates every element of `boxes` in order and checks that they are
// exactly begin, begin+1, ..., end-1 (which implies disjoint, exact cover and
// row-major order of the boxes).
TEST(FlatRangeToBoxesTest, RandomizedExactCover) {
  std::mt19937_64 rng(12345);
  for (int iter = 0; iter < 20000; ++iter) {
    const int ndim = static_cast<int>(rng() % 5);  // 0..4
    Shape shape(ndim);
    for (int64_t& s : shape) s = static_cast<int64_t>(rng() % 5);  // includes 0
    if (rng() % 4 == 0) {
      for (int64_t& s : shape) s = s == 0 ? 1 : s;  // mostly non-empty too
    }
    int64_t numel = 1;
    for (int64_t s : shape) numel *= s;
    int64_t a = static_cast<int64_t>(rng() % (numel + 1));
    int64_t b = static_cast<int64_t>(rng() % (numel + 1));
    if (a > b) std::swap(a, b);
    const std::vector<Box> boxes = FlatRangeToBoxes(shape, a, b);
    SCOPED_TRACE(ShapeToString(shape) + " [" + std::to_string(a) + ", " + std::to_string(b) + ")");
    ASSERT_LE(boxes.size(), static_cast<size_t>(ndim == 0 ? 1 : 2 * ndim - 1));
    int64_t next = a;
    for (const Box& box : boxes) {
      ASSERT_TRUE(ValidateBoxInShape(box, shape).ok()) << box.ToString();
      ASSERT_FALSE(box.empty()) << box.ToString();
      const int64_t n = box.num_elements();
      for (int64_t i = 0; i < n; ++i) {
        Shape idx = UnravelIndex(box.shape, i);
        for (int d = 0; d < ndim; ++d) idx[d] += box.offset[d];
        ASSERT_EQ(RowMajorIndex(shape, idx), next) << box.ToString();
        ++next;
      }
    }
    ASSERT_EQ(next, b);
  }
}

}  // namespace
}  // namespace shardpoint::internal_geometry
