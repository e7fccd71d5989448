// UnflattenNdTensor: Megatron-Core's N-D flattened tensors back in their
// original shape; malformed ones are DataLoss naming the key.
#include "src/dcp/nd_flattened.h"

#include <gtest/gtest.h>

using shardpoint::internal_format::ChunkRecord;
using shardpoint::internal_format::TensorRecord;

namespace shardpoint::internal_dcp {
namespace {

ChunkRecord Chunk(Box box, uint64_t offset) {
  ChunkRecord c;
  c.box = std::move(box);
  c.file = 3;
  c.offset = offset;
  c.nbytes = static_cast<uint64_t>(c.box.num_elements()) * 4;
  return c;
}

// [4, 6] in blocks of [2, 3] (a TP 2 x 2 grid), stored as [2, 2, 6]. Block
// (1, 0) is split mid-row: elements [0, 4) at byte 1000 and [4, 6) at 2000.
TEST(NdFlattenedTest, ChunksBecomeBoxesOfTheirBlocks) {
  TensorRecord t;
  t.key = "optimizer.state.exp_avg.w";
  t.dtype = DType::kF32;
  t.shape = {2, 2, 6};
  t.chunks = {Chunk({{0, 0, 0}, {1, 1, 6}}, 0), Chunk({{0, 1, 0}, {1, 1, 6}}, 100),
              Chunk({{1, 0, 0}, {1, 1, 4}}, 1000), Chunk({{1, 0, 4}, {1, 1, 2}}, 2000),
              Chunk({{1, 1, 0}, {1, 1, 6}}, 300)};
  Result<std::vector<int64_t>> moved = UnflattenNdTensor({4, 6}, &t);
  ASSERT_TRUE(moved.ok()) << moved.status().ToString();
  EXPECT_EQ(t.shape, (Shape{4, 6}));
  std::vector<std::pair<Box, uint64_t>> got;
  for (const ChunkRecord& c : t.chunks) {
    EXPECT_EQ(c.file, 3u);
    EXPECT_EQ(c.nbytes, static_cast<uint64_t>(c.box.num_elements()) * 4);
    got.push_back({c.box, c.offset});
  }
  // Block (1, 0) = rows 2-3, cols 0-2: [0, 4) is row 2 and row 3's first
  // element; [4, 6) the rest of row 3.
  const std::vector<std::pair<Box, uint64_t>> want = {
      {Box{{0, 0}, {2, 3}}, 0},   {Box{{0, 3}, {2, 3}}, 100},  {Box{{2, 0}, {1, 3}}, 1000},
      {Box{{2, 3}, {2, 3}}, 300}, {Box{{3, 0}, {1, 1}}, 1012}, {Box{{3, 1}, {1, 2}}, 2000}};
  EXPECT_EQ(got, want);
  EXPECT_EQ(*moved, (std::vector<int64_t>{0, 1, 2, 5, 3}));
}

TEST(NdFlattenedTest, MalformedIsDataLossNamingTheKey) {
  TensorRecord t;
  t.key = "optimizer.state.exp_avg.w";
  t.shape = {2, 2, 6};
  t.chunks = {Chunk({{0, 0, 0}, {2, 1, 6}}, 0)};
  for (const Shape& orig : {Shape{4, 7}, Shape{4, 6, 1}, Shape{4, 8}, Shape{}}) {
    TensorRecord u = t;
    Result<std::vector<int64_t>> r = UnflattenNdTensor(orig, &u);
    ASSERT_FALSE(r.ok()) << ShapeToString(orig);
    EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
    EXPECT_NE(r.status().message().find("'optimizer.state.exp_avg.w': stored shape [2, 2, 6]"),
              std::string::npos)
        << r.status().message();
  }
  Result<std::vector<int64_t>> r = UnflattenNdTensor({4, 6}, &t);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(r.status().message().find("spans several blocks"), std::string::npos);
}

}  // namespace
}  // namespace shardpoint::internal_dcp
