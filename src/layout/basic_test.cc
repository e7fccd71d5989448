#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "shardpoint/layout.h"

namespace shardpoint {
namespace {

TEST(ChunkSizesTest, TorchChunk) {
  EXPECT_EQ(ChunkSizes(10, 4), (std::vector<int64_t>{3, 3, 3, 1}));
  EXPECT_EQ(ChunkSizes(5, 4), (std::vector<int64_t>{2, 2, 1, 0}));
  EXPECT_EQ(ChunkSizes(6, 4), (std::vector<int64_t>{2, 2, 2, 0}));  // torch.chunk gives 3
  EXPECT_EQ(ChunkSizes(8, 4), (std::vector<int64_t>{2, 2, 2, 2}));
  EXPECT_EQ(ChunkSizes(0, 3), (std::vector<int64_t>{0, 0, 0}));
  EXPECT_EQ(ChunkSizes(2, 5), (std::vector<int64_t>{1, 1, 0, 0, 0}));
  EXPECT_TRUE(ChunkSizes(4, 0).empty());
  EXPECT_TRUE(ChunkSizes(-1, 2).empty());
}

TEST(LayoutTest, WholeTensor) {
  float x = 0;
  LocalTensor t = WholeTensor("w", DType::kF32, &x, {2, 3});
  EXPECT_EQ(t.data, &x);
  EXPECT_EQ(t.shape, (Shape{2, 3}));
  ASSERT_EQ(t.segments.size(), 1u);
  EXPECT_EQ(t.segments[0].key, "w");
  EXPECT_EQ(t.segments[0].global_box, Box::Whole({2, 3}));
  EXPECT_EQ(t.segments[0].local_offset, (Shape{0, 0}));
  EXPECT_TRUE(ValidateLocalTensor(t).ok());
  EXPECT_TRUE(ValidateLocalTensor(WholeTensor("s", DType::kI64, &x, {})).ok());
}

TEST(LayoutTest, SplitTensor) {
  Result<LocalTensor> t = SplitTensor("w", DType::kBF16, nullptr, {10, 4}, 0, 2, 4);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->shape, (Shape{3, 4}));
  EXPECT_EQ(t->segments[0].global_box, Box({6, 0}, {3, 4}));
  EXPECT_EQ(t->segments[0].global_shape, (Shape{10, 4}));
  t = SplitTensor("w", DType::kBF16, nullptr, {4, 10}, 1, 3, 4);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->segments[0].global_box, Box({0, 9}, {4, 1}));
  // An empty shard past the end still carries its segment.
  t = SplitTensor("w", DType::kBF16, nullptr, {5}, 0, 3, 4);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->shape, (Shape{0}));
  EXPECT_EQ(t->segments[0].global_box, Box({5}, {0}));
  EXPECT_TRUE(ValidateLocalTensor(*t).ok());
  EXPECT_FALSE(SplitTensor("w", DType::kF32, nullptr, {4}, 1, 0, 2).ok());
  EXPECT_FALSE(SplitTensor("w", DType::kF32, nullptr, {4}, -1, 0, 2).ok());
  EXPECT_FALSE(SplitTensor("w", DType::kF32, nullptr, {4}, 0, 2, 2).ok());
  Status s = SplitTensor("w", DType::kF32, nullptr, {4}, 0, 0, 0).status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("'w'"), std::string::npos);
}

TEST(LayoutTest, SplitTensorSizes) {
  Result<LocalTensor> t = SplitTensorSizes("emb", DType::kF32, nullptr, {10, 2}, 0, {4, 0, 6}, 2);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->segments[0].global_box, Box({4, 0}, {6, 2}));
  t = SplitTensorSizes("emb", DType::kF32, nullptr, {10, 2}, 0, {4, 0, 6}, 1);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->segments[0].global_box, Box({4, 0}, {0, 2}));
  Status s = SplitTensorSizes("emb", DType::kF32, nullptr, {10, 2}, 0, {4, 5}, 0).status();
  EXPECT_NE(s.message().find("sum to 9"), std::string::npos) << s.ToString();
  EXPECT_FALSE(SplitTensorSizes("emb", DType::kF32, nullptr, {10}, 0, {11, -1}, 0).ok());
  EXPECT_FALSE(SplitTensorSizes("emb", DType::kF32, nullptr, {10}, 0, {10}, 1).ok());
  EXPECT_FALSE(SplitTensorSizes("emb", DType::kF32, nullptr, {10}, 0, {}, 0).ok());
  EXPECT_FALSE(
      SplitTensorSizes("emb", DType::kF32, nullptr, {10}, 0, {INT64_MAX, INT64_MAX, 12}, 0).ok());
}

TEST(LayoutTest, FlatShard) {
  int buf = 0;
  LocalTensor full = WholeTensor("w", DType::kF32, nullptr, {4, 4});
  Result<LocalTensor> t = FlatShard(full, FlatRange{5, 11}, &buf);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->data, &buf);
  EXPECT_EQ(t->flat, (FlatRange{5, 11}));
  EXPECT_EQ(t->segments.size(), 1u);
  EXPECT_FALSE(FlatShard(full, FlatRange{5, 17}, &buf).ok());
  EXPECT_FALSE(FlatShard(*t, FlatRange{5, 6}, &buf).ok());  // already flat
  full.strides = {1, 4};
  EXPECT_FALSE(FlatShard(full, FlatRange{0, 1}, &buf).ok());
}

TEST(LayoutTest, ConcatFusedWeight) {
  // SwiGLU fc1 on TP rank 1 of 2: [W rows 4:8; V rows 4:8].
  Result<LocalTensor> w = SplitTensor("fc1.w", DType::kBF16, nullptr, {8, 3}, 0, 1, 2);
  Result<LocalTensor> v = SplitTensor("fc1.v", DType::kBF16, nullptr, {8, 3}, 0, 1, 2);
  ASSERT_TRUE(w.ok() && v.ok());
  int buf = 0;
  Result<LocalTensor> t = Concat({*w, *v}, 0, &buf);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->shape, (Shape{8, 3}));
  EXPECT_EQ(t->data, &buf);
  ASSERT_EQ(t->segments.size(), 2u);
  EXPECT_EQ(t->segments[0].key, "fc1.w");
  EXPECT_EQ(t->segments[0].local_offset, (Shape{0, 0}));
  EXPECT_EQ(t->segments[1].key, "fc1.v");
  EXPECT_EQ(t->segments[1].local_offset, (Shape{4, 0}));
  EXPECT_EQ(t->segments[1].global_box, Box({4, 0}, {4, 3}));
  // Nested: concatenating a fused tensor again keeps all segments.
  Result<LocalTensor> twice =
      Concat({*t, WholeTensor("b", DType::kBF16, nullptr, {2, 3})}, 0, &buf);
  ASSERT_TRUE(twice.ok());
  EXPECT_EQ(twice->shape, (Shape{10, 3}));
  EXPECT_EQ(twice->segments[2].local_offset, (Shape{8, 0}));
  // Along dim 1.
  Result<LocalTensor> cols = Concat({*w, *v}, 1, &buf);
  ASSERT_TRUE(cols.ok());
  EXPECT_EQ(cols->shape, (Shape{4, 6}));
  EXPECT_EQ(cols->segments[1].local_offset, (Shape{0, 3}));
}

TEST(LayoutTest, ConcatErrors) {
  LocalTensor a = WholeTensor("a", DType::kF32, nullptr, {2, 3});
  EXPECT_FALSE(Concat({}, 0, nullptr).ok());
  EXPECT_FALSE(Concat({a}, 2, nullptr).ok());
  EXPECT_FALSE(Concat({a, WholeTensor("b", DType::kF16, nullptr, {2, 3})}, 0, nullptr).ok());
  EXPECT_FALSE(Concat({a, WholeTensor("b", DType::kF32, nullptr, {2, 4})}, 0, nullptr).ok());
  EXPECT_FALSE(Concat({a, WholeTensor("b", DType::kF32, nullptr, {2})}, 0, nullptr).ok());
  EXPECT_TRUE(Concat({a, WholeTensor("b", DType::kF32, nullptr, {2, 4})}, 1, nullptr).ok());
  LocalTensor flat = *FlatShard(a, FlatRange{0, 2}, nullptr);
  EXPECT_FALSE(Concat({a, flat}, 0, nullptr).ok());
  LocalTensor bad = a;
  bad.segments[0].key = "";
  Status s = Concat({a, bad}, 0, nullptr).status();
  EXPECT_NE(s.message().find("Concat part 1"), std::string::npos) << s.ToString();
}

}  // namespace
}  // namespace shardpoint
