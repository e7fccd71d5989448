#include "src/geometry/view.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "src/geometry/flat_range.h"

namespace shardpoint::internal_geometry {
namespace {

// The reference: one element at a time, by multi-index.
void NaiveCopy(const View& dst, const View& src) {
  const int64_t n = src.num_elements();
  for (int64_t i = 0; i < n; ++i) {
    const Shape idx = UnravelIndex(src.shape, i);
    int64_t so = 0, dof = 0;
    for (size_t d = 0; d < idx.size(); ++d) {
      so += idx[d] * src.byte_strides[d];
      dof += idx[d] * dst.byte_strides[d];
    }
    std::memcpy(dst.data + dof, src.data + so, src.elem_size);
  }
}

TEST(ViewTest, ContiguousAndSub) {
  std::vector<float> buf(24);
  View v = ContiguousView(buf.data(), 4, {2, 3, 4});
  EXPECT_EQ(v.byte_strides, (Shape{48, 16, 4}));
  EXPECT_EQ(v.num_elements(), 24);
  EXPECT_TRUE(v.IsContiguous());
  View s = v.Sub(Box({1, 1, 0}, {1, 2, 4}));
  EXPECT_EQ(s.data, reinterpret_cast<char*>(buf.data() + 16));
  EXPECT_EQ(s.shape, (Shape{1, 2, 4}));
  EXPECT_TRUE(s.IsContiguous());  // full rows of one dim-0 slice
  EXPECT_FALSE(v.Sub(Box({0, 0, 0}, {2, 3, 2})).IsContiguous());
  EXPECT_TRUE(v.Sub(Box({0, 0, 0}, {2, 0, 2})).IsContiguous());  // empty
  View zero_d = ContiguousView(buf.data(), 4, {});
  EXPECT_EQ(zero_d.num_elements(), 1);
  EXPECT_TRUE(zero_d.IsContiguous());
}

TEST(StridedCopyTest, ZeroDAndEmpty) {
  int32_t a = 7, b = 0;
  StridedCopy(ContiguousView(&b, 4, {}), ContiguousView(&a, 4, {}));
  EXPECT_EQ(b, 7);
  // Zero elements: nothing is touched (null data is fine).
  StridedCopy(ContiguousView(nullptr, 4, {3, 0, 2}), ContiguousView(nullptr, 4, {3, 0, 2}));
}

TEST(StridedCopyTest, ColumnSplit) {
  // Copy the right half of a [4, 6] row-major tensor into a contiguous [4, 3].
  std::vector<uint16_t> src(24), dst(12, 0);
  std::iota(src.begin(), src.end(), 0);
  View s = ContiguousView(src.data(), 2, {4, 6}).Sub(Box({0, 3}, {4, 3}));
  StridedCopy(ContiguousView(dst.data(), 2, {4, 3}), s);
  EXPECT_EQ(dst, (std::vector<uint16_t>{3, 4, 5, 9, 10, 11, 15, 16, 17, 21, 22, 23}));
}

TEST(StridedCopyTest, Transpose) {
  std::vector<uint32_t> src(6), dst(6, 0);
  std::iota(src.begin(), src.end(), 0);  // [2, 3]
  View t;                                // src transposed: shape [3, 2]
  t.data = reinterpret_cast<char*>(src.data());
  t.elem_size = 4;
  t.shape = {3, 2};
  t.byte_strides = {4, 12};
  StridedCopy(ContiguousView(dst.data(), 4, {3, 2}), t);
  EXPECT_EQ(dst, (std::vector<uint32_t>{0, 3, 1, 4, 2, 5}));
}

TEST(StridedCopyTest, OddElementSize) {
  // 3-byte elements, strided source (every other element).
  std::vector<uint8_t> src(3 * 8), dst(3 * 4, 0);
  std::iota(src.begin(), src.end(), 0);
  View s;
  s.data = reinterpret_cast<char*>(src.data());
  s.elem_size = 3;
  s.shape = {4};
  s.byte_strides = {6};
  StridedCopy(ContiguousView(dst.data(), 3, {4}), s);
  EXPECT_EQ(dst, (std::vector<uint8_t>{0, 1, 2, 6, 7, 8, 12, 13, 14, 18, 19, 20}));
}

// Transposed views longer than one strip of the strided-inner path, with a
// partial last strip and an outer odometer dim.
TEST(StridedCopyTest, TransposedStrips) {
  for (size_t es : {2, 4, 8, 3}) {
    const Shape shape = {3, 37, 50};
    std::vector<char> src(3 * 37 * 50 * es), dst(src.size(), 0), expected(src.size(), 0);
    for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<char>(i * 7 + 1);
    View s = ContiguousView(src.data(), es, {3, 50, 37});
    s.shape = shape;
    std::swap(s.byte_strides[1], s.byte_strides[2]);
    View d = ContiguousView(dst.data(), es, shape);
    StridedCopy(d, s);
    View e = d;
    e.data = expected.data();
    NaiveCopy(e, s);
    EXPECT_EQ(dst, expected) << es;
  }
}

// Random shapes up to 5-d with extent-0/1 dims; the source is a sliced and
// dim-permuted view of a larger buffer, the destination a sliced view of
// another; the result must equal the naive copy, and nothing outside the
// destination view may change.
TEST(StridedCopyTest, RandomizedAgainstNaive) {
  std::mt19937_64 rng(42);
  const size_t elem_sizes[] = {1, 2, 3, 4, 8, 16};
  for (int iter = 0; iter < 3000; ++iter) {
    const size_t rank = rng() % 6;
    const size_t es = elem_sizes[rng() % 6];
    Shape shape(rank);
    for (int64_t& s : shape) s = static_cast<int64_t>(rng() % 5);
    if (rng() % 3) {
      for (int64_t& s : shape) s = std::max<int64_t>(s, 1);
    }
    // A view of `shape` inside a bigger row-major buffer (padding per dim),
    // with the buffer's dims permuted.
    auto make_view = [&](std::vector<uint8_t>& storage) {
      std::vector<size_t> perm(rank);
      std::iota(perm.begin(), perm.end(), 0);
      if (rng() % 2) std::shuffle(perm.begin(), perm.end(), rng);
      Shape outer(rank), offset(rank);
      for (size_t d = 0; d < rank; ++d) {
        const int64_t pad = rng() % 2 ? static_cast<int64_t>(rng() % 3) : 0;
        offset[d] = pad ? static_cast<int64_t>(rng() % (pad + 1)) : 0;
        outer[d] = shape[d] + pad;
      }
      // Buffer dims are ordered by perm: buffer dim k holds view dim perm[k].
      Shape buf_shape(rank);
      for (size_t k = 0; k < rank; ++k) buf_shape[k] = outer[perm[k]];
      View buf = ContiguousView(nullptr, es, buf_shape);
      int64_t bytes = static_cast<int64_t>(es);
      for (int64_t s : buf_shape) bytes *= s;
      storage.resize(static_cast<size_t>(bytes) + 1);
      for (uint8_t& c : storage) c = static_cast<uint8_t>(rng());
      View v;
      v.data = reinterpret_cast<char*>(storage.data());
      v.elem_size = es;
      v.shape = shape;
      v.byte_strides.resize(rank);
      for (size_t k = 0; k < rank; ++k) v.byte_strides[perm[k]] = buf.byte_strides[k];
      for (size_t d = 0; d < rank; ++d) v.data += offset[d] * v.byte_strides[d];
      return v;
    };
    std::vector<uint8_t> src_buf, dst_buf;
    View src = make_view(src_buf);
    View dst = make_view(dst_buf);
    std::vector<uint8_t> expected = dst_buf;
    View expected_view = dst;
    expected_view.data = reinterpret_cast<char*>(expected.data()) +
                         (dst.data - reinterpret_cast<char*>(dst_buf.data()));
    NaiveCopy(expected_view, src);
    StridedCopy(dst, src);
    ASSERT_EQ(dst_buf, expected) << "iter " << iter << " shape " << ShapeToString(shape) << " elem "
                                 << es;
  }
}

// More dims than the inline storage, none mergeable (a transpose-like view of
// 2^18 elements): exercises the heap fallback of the odometer.
TEST(StridedCopyTest, ManyDims) {
  const size_t rank = 18;
  std::vector<uint32_t> src(size_t{1} << rank), dst(src.size(), 0), expected(src.size(), 0);
  std::iota(src.begin(), src.end(), 0);
  View s = ContiguousView(src.data(), 4, Shape(rank, 2));
  std::reverse(s.byte_strides.begin(), s.byte_strides.end());  // full transpose
  View d = ContiguousView(dst.data(), 4, Shape(rank, 2));
  StridedCopy(d, s);
  View e = d;
  e.data = reinterpret_cast<char*>(expected.data());
  NaiveCopy(e, s);
  EXPECT_EQ(dst, expected);
}

}  // namespace
}  // namespace shardpoint::internal_geometry
