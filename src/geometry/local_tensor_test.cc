#include <gtest/gtest.h>

#include <string>

#include "shardpoint/tensor.h"

namespace shardpoint {
namespace {

Segment Seg(std::string key, Shape global_shape, Box box, Shape local_offset) {
  Segment s;
  s.key = std::move(key);
  s.global_shape = std::move(global_shape);
  s.global_box = std::move(box);
  s.local_offset = std::move(local_offset);
  return s;
}

// A [8, 4] local tensor holding fc1 = [W rows 0:4; V rows 0:4] of two [16, 4] tensors.
LocalTensor Fused() {
  LocalTensor t;
  t.dtype = DType::kBF16;
  t.shape = {8, 4};
  t.segments = {Seg("w", {16, 4}, Box({0, 0}, {4, 4}), {0, 0}),
                Seg("v", {16, 4}, Box({0, 0}, {4, 4}), {4, 0})};
  return t;
}

void ExpectInvalid(const LocalTensor& t, const std::string& needle) {
  Status s = ValidateLocalTensor(t);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find(needle), std::string::npos) << s.ToString();
}

TEST(ValidateLocalTensorTest, AcceptsValid) {
  EXPECT_TRUE(ValidateLocalTensor(Fused()).ok());
  LocalTensor t = Fused();
  t.flat = FlatRange{3, 29};
  EXPECT_TRUE(ValidateLocalTensor(t).ok());
  t.flat = FlatRange{32, 32};
  EXPECT_TRUE(ValidateLocalTensor(t).ok());
  // 0-d.
  LocalTensor s;
  s.shape = {};
  s.segments = {Seg("step", {}, Box(), {})};
  EXPECT_TRUE(ValidateLocalTensor(s).ok());
  // A per-expert [4, 2] tensor placed at expert 1 of a stacked [3, 4, 2].
  LocalTensor e;
  e.shape = {3, 4, 2};
  e.segments = {Seg("e0", {4, 2}, Box::Whole({4, 2}), {0, 0, 0}),
                Seg("e1", {4, 2}, Box::Whole({4, 2}), {1, 0, 0})};
  EXPECT_TRUE(ValidateLocalTensor(e).ok());
  // Strided (a transposed view), and empty segments that share an offset.
  LocalTensor st = Fused();
  st.strides = {1, 8};
  EXPECT_TRUE(ValidateLocalTensor(st).ok());
  LocalTensor z;
  z.shape = {0, 4};
  z.segments = {Seg("a", {4, 4}, Box({4, 0}, {0, 4}), {0, 0}),
                Seg("b", {4, 4}, Box({4, 0}, {0, 4}), {0, 0})};
  EXPECT_TRUE(ValidateLocalTensor(z).ok());
  // Column-split segments side by side (disjoint only in dim 1).
  LocalTensor c;
  c.shape = {4, 4};
  c.segments = {Seg("a", {4, 2}, Box::Whole({4, 2}), {0, 0}),
                Seg("b", {4, 2}, Box::Whole({4, 2}), {0, 2})};
  EXPECT_TRUE(ValidateLocalTensor(c).ok());
}

TEST(ValidateLocalTensorTest, RejectsBadTensor) {
  LocalTensor t = Fused();
  t.dtype = static_cast<DType>(99);
  ExpectInvalid(t, "dtype");
  t = Fused();
  t.shape = {8, -4};
  ExpectInvalid(t, "negative");
  t = Fused();
  t.shape = {int64_t{1} << 40, int64_t{1} << 40};
  ExpectInvalid(t, "overflow");
  t = Fused();
  t.strides = {4};
  ExpectInvalid(t, "rank");
  t = Fused();
  t.strides = {4, -1};
  ExpectInvalid(t, "negative");
  t = Fused();
  t.strides = {int64_t{1} << 62, 1};
  ExpectInvalid(t, "overflow");
  t = Fused();
  t.flat = FlatRange{0, 33};
  ExpectInvalid(t, "flat range [0, 33)");
  t.flat = FlatRange{5, 4};
  ExpectInvalid(t, "flat range");
  t.flat = FlatRange{-1, 4};
  ExpectInvalid(t, "flat range");
  t = Fused();
  t.flat = FlatRange{0, 4};
  t.strides = {4, 1};
  ExpectInvalid(t, "strides");
}

TEST(ValidateLocalTensorTest, RejectsBadSegment) {
  LocalTensor t = Fused();
  t.segments[1].key = "";
  ExpectInvalid(t, "empty key");
  t = Fused();
  t.segments[1].global_shape = Shape(33, 1);
  ExpectInvalid(t, "rank 33, more than 32");
  t = Fused();
  t.segments[1].global_box = Box({14, 0}, {4, 4});
  ExpectInvalid(t, "'v' global box");
  t = Fused();
  t.segments[1].global_shape = {16, -4};
  ExpectInvalid(t, "'v'");
  t = Fused();
  t.segments[1].local_offset = {4};
  ExpectInvalid(t, "local offset [4]");
  t = Fused();
  t.segments[1].local_offset = {5, 0};
  ExpectInvalid(t, "segment 'v' (global box [0:4, 0:4] of [16, 4]) does not fit");
  t = Fused();
  t.segments[1].global_box.offset = {-1, 0};
  ExpectInvalid(t, "'v'");
  // Local rank below the global rank.
  LocalTensor r;
  r.shape = {16};
  r.segments = {Seg("x", {4, 4}, Box::Whole({4, 4}), {0})};
  ExpectInvalid(r, "'x'");
}

TEST(ValidateLocalTensorTest, RejectsOverlap) {
  LocalTensor t = Fused();
  t.segments[1].local_offset = {3, 0};
  t.shape = {8, 4};
  ExpectInvalid(t, "overlap in the local tensor at [3:4, 0:4]");
  ExpectInvalid(t, "'w'");
  // Overlap found even when many boxes share the sweep dim.
  LocalTensor c;
  c.shape = {4, 8};
  for (int i = 0; i < 4; ++i) {
    c.segments.push_back(Seg("k" + std::to_string(i), {4, 2}, Box::Whole({4, 2}), {0, 2 * i}));
  }
  EXPECT_TRUE(ValidateLocalTensor(c).ok());
  c.segments.push_back(Seg("late", {1, 1}, Box::Whole({1, 1}), {2, 5}));
  ExpectInvalid(c, "'k2'");
  ExpectInvalid(c, "'late'");
  LocalTensor z;  // two 0-d segments
  z.segments = {Seg("a", {}, Box(), {}), Seg("b", {}, Box(), {})};
  ExpectInvalid(z, "0-d");
}

}  // namespace
}  // namespace shardpoint
