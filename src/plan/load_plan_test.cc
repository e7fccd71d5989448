#include "src/plan/load_plan.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "src/geometry/flat_range.h"

using shardpoint::internal_format::ChunkRecord;
using shardpoint::internal_format::Manifest;
using shardpoint::internal_format::TensorRecord;
using shardpoint::internal_geometry::ContiguousView;
using shardpoint::internal_geometry::RowMajorIndex;
using shardpoint::internal_geometry::UnravelIndex;

namespace shardpoint::internal_plan {
namespace {

Manifest TwoChunks() {
  // w: [8, 6] F32 stored as rows [0:4] and [4:8].
  Manifest m;
  m.files = {"data/0.safetensors"};
  TensorRecord t{"w", DType::kF32, {8, 6}, {}};
  t.chunks.push_back(ChunkRecord{Box({0, 0}, {4, 6}), 0, 4096, 96, 0, {}});
  t.chunks.push_back(ChunkRecord{Box({4, 0}, {4, 6}), 0, 4096 + 96, 96, 0, {}});
  m.tensors.push_back(t);
  return m;
}

Region Want(Box box, std::vector<float>* mem) {
  mem->resize(box.num_elements());
  Region r;
  r.desc = RegionDesc{"w", DType::kF32, {8, 6}, box};
  r.view = ContiguousView(mem->data(), 4, box.shape);
  return r;
}

TEST(RunsTest, FullTrailingDimsMakeOneRun) {
  RunPattern p = RunsOf({4, 6}, Box({1, 0}, {2, 6}));
  EXPECT_EQ(p.runs, 1);
  EXPECT_EQ(p.run_elements, 12);
  EXPECT_EQ(RunStart({4, 6}, Box({1, 0}, {2, 6}), p, 0), 6);
}

TEST(RunsTest, ColumnSliceIsOneRunPerRow) {
  const Box in({1, 2}, {3, 2});
  RunPattern p = RunsOf({4, 6}, in);
  EXPECT_EQ(p.runs, 3);
  EXPECT_EQ(p.run_elements, 2);
  EXPECT_EQ(RunStart({4, 6}, in, p, 0), 8);
  EXPECT_EQ(RunStart({4, 6}, in, p, 2), 20);
}

TEST(RunsTest, RunsCoverExactlyTheBoxForRandomBoxes) {
  std::mt19937_64 rng(3);
  for (int iter = 0; iter < 2000; ++iter) {
    Shape shape(rng() % 5);
    for (auto& s : shape) s = 1 + rng() % 4;
    Box in;
    for (int64_t s : shape) {
      int64_t a = rng() % s, b = a + 1 + rng() % (s - a);
      in.offset.push_back(a);
      in.shape.push_back(b - a);
    }
    RunPattern p = RunsOf(shape, in);
    std::vector<int64_t> got;
    for (int64_t i = 0; i < p.runs; ++i) {
      int64_t s = RunStart(shape, in, p, i);
      for (int64_t e = 0; e < p.run_elements; ++e) got.push_back(s + e);
    }
    std::vector<int64_t> want;
    for (int64_t i = 0; i < in.num_elements(); ++i) {
      Shape idx = UnravelIndex(in.shape, i);
      for (size_t d = 0; d < idx.size(); ++d) idx[d] += in.offset[d];
      want.push_back(RowMajorIndex(shape, idx));
    }
    ASSERT_EQ(got, want) << ShapeToString(shape) << " " << in.ToString();
  }
}

TEST(RunsTest, ElementsBeforeCountsTheBoxElementsBelowEveryIndex) {
  std::mt19937 rng(7);
  for (int iter = 0; iter < 500; ++iter) {
    Shape shape(rng() % 5);
    for (auto& s : shape) s = 1 + rng() % 4;
    Box in;
    for (int64_t s : shape) {
      int64_t a = rng() % s, b = a + 1 + rng() % (s - a);
      in.offset.push_back(a);
      in.shape.push_back(b - a);
    }
    std::vector<int64_t> members;  // ascending: row-major order of the box
    for (int64_t i = 0; i < in.num_elements(); ++i) {
      Shape idx = UnravelIndex(in.shape, i);
      for (size_t d = 0; d < idx.size(); ++d) idx[d] += in.offset[d];
      members.push_back(RowMajorIndex(shape, idx));
    }
    const int64_t total = Box::Whole(shape).num_elements();
    for (int64_t l = 0; l <= total; ++l) {
      const int64_t want = std::lower_bound(members.begin(), members.end(), l) - members.begin();
      ASSERT_EQ(ElementsBefore(shape, in, l), want)
          << ShapeToString(shape) << " " << in.ToString() << " at " << l;
    }
  }
}

TEST(PlanLoadTest, ReadsOnlyTheNeededBytes) {
  Manifest m = TwoChunks();
  std::vector<float> mem;
  // Rows 3..5, columns 2..4: 3 rows x 2 columns from two chunks.
  Result<LoadPlan> plan = PlanLoad(m, {Want(Box({3, 2}, {3, 2}), &mem)});
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->bytes, 3u * 2 * 4);
  ASSERT_EQ(plan->pieces.size(), 2u);
  EXPECT_FALSE(plan->pieces[0].whole_chunk);
}

TEST(PlanLoadTest, WholeChunkIsMarkedForChecksum) {
  Manifest m = TwoChunks();
  std::vector<float> mem;
  Result<LoadPlan> plan = PlanLoad(m, {Want(Box({4, 0}, {4, 6}), &mem)});
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->pieces.size(), 1u);
  EXPECT_TRUE(plan->pieces[0].whole_chunk);
  EXPECT_EQ(plan->pieces[0].chunk, 1);
}

TEST(PlanLoadTest, UncoveredRegionIsDataLoss) {
  Manifest m = TwoChunks();
  m.tensors[0].chunks.pop_back();
  std::vector<float> mem;
  Result<LoadPlan> plan = PlanLoad(m, {Want(Box({2, 0}, {4, 6}), &mem)});
  EXPECT_EQ(plan.status().code(), StatusCode::kDataLoss);
  EXPECT_THAT(plan.status().message(),
              ::testing::HasSubstr("tensor 'w': stored chunks cover 12 of the 24 elements of box "
                                   "[2:6, 0:6]"));
}

TEST(PlanLoadTest, IndexFindsChunksAmongManyWithoutScanningAll) {
  // 10,000 single-row chunks; a query for 3 rows gets exactly 3 pieces.
  Manifest m;
  m.files = {"data/0.safetensors"};
  TensorRecord t{"w", DType::kF32, {10000, 6}, {}};
  for (int64_t i = 0; i < 10000; ++i) {
    t.chunks.push_back(
        ChunkRecord{Box({i, 0}, {1, 6}), 0, 4096 + 24 * static_cast<uint64_t>(i), 24, 0, {}});
  }
  m.tensors.push_back(t);
  std::vector<float> mem;
  Region r = Want(Box({5000, 0}, {3, 6}), &mem);
  r.desc.global_shape = {10000, 6};
  Result<LoadPlan> plan = PlanLoad(m, {r});
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->pieces.size(), 3u);
}

}  // namespace
}  // namespace shardpoint::internal_plan
