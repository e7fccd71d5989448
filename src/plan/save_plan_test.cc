#include "src/plan/save_plan.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>

using shardpoint::internal_format::EncodeManifest;

namespace shardpoint::internal_plan {
namespace {

using ::testing::HasSubstr;

RegionDesc R(const std::string& key, Box box, Shape shape = {8, 4}, DType dtype = DType::kF32) {
  return RegionDesc{key, dtype, std::move(shape), std::move(box)};
}

Box Rows(int64_t begin, int64_t n) { return Box({begin, 0}, {n, 4}); }

TEST(PlanSaveTest, ReplicasAreBalancedLargestFirstLeastLoaded) {
  // Four equal row blocks, each held by all four ranks: one writer each.
  std::vector<Contribution> ranks(4);
  for (auto& c : ranks) {
    for (int i = 0; i < 4; ++i) c.regions.push_back(R("w", Rows(2 * i, 2)));
  }
  Result<SavePlan> plan = PlanSave(ranks);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  for (const RankFile& rf : plan->ranks) EXPECT_EQ(rf.items.size(), 1u);
  EXPECT_EQ(plan->manifest.tensors.size(), 1u);
  EXPECT_EQ(plan->manifest.tensors[0].chunks.size(), 4u);
  EXPECT_EQ(plan->total_bytes, 8u * 4 * 4);
}

TEST(PlanSaveTest, ListsEveryReplicaANonWriterHoldsOnlyWhenAsked) {
  std::vector<Contribution> ranks(3);
  for (auto& c : ranks) {
    for (int i = 0; i < 4; ++i) c.regions.push_back(R("w", Rows(2 * i, 2)));
  }
  Result<SavePlan> plan = PlanSave(ranks, /*list_replicas=*/true);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  size_t written = 0, replicas = 0;
  for (const RankFile& rf : plan->ranks) {
    written += rf.items.size();
    replicas += rf.replicas.size();
    for (const WriteItem& rep : rf.replicas) {
      for (const WriteItem& own : rf.items) EXPECT_NE(rep.chunk, own.chunk);
    }
  }
  EXPECT_EQ(written, 4u);
  EXPECT_EQ(replicas, 8u);  // each of 4 chunks has 2 holders that do not write it
  Result<SavePlan> lean = PlanSave(ranks);
  for (const RankFile& rf : lean->ranks) EXPECT_TRUE(rf.replicas.empty());
}

TEST(PlanSaveTest, BalancesBytesAcrossKeys) {
  // A big tensor held by ranks 0,1 and a small one held by ranks 0,1: the
  // big one goes to rank 0, the small one to rank 1.
  std::vector<Contribution> ranks(2);
  for (auto& c : ranks) {
    c.regions.push_back(R("big", Box::Whole({64, 4}), {64, 4}));
    c.regions.push_back(R("small", Box::Whole({2, 4}), {2, 4}));
  }
  Result<SavePlan> plan = PlanSave(ranks);
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->ranks[0].items.size(), 1u);
  ASSERT_EQ(plan->ranks[1].items.size(), 1u);
  EXPECT_EQ(plan->manifest.tensors[plan->ranks[0].items[0].record].key, "big");
  EXPECT_EQ(plan->manifest.tensors[plan->ranks[1].items[0].record].key, "small");
}

TEST(PlanSaveTest, DeterministicWhateverTheRegionOrder) {
  std::mt19937_64 rng(7);
  std::vector<Contribution> ranks(3);
  for (int r = 0; r < 3; ++r) {
    for (int k = 0; k < 3; ++k) {
      for (int i = 0; i < 8; ++i) {
        if (i % 3 == r || i == 7)
          ranks[r].regions.push_back(R("k" + std::to_string(k), Rows(i, 1)));
      }
    }
  }
  Result<SavePlan> a = PlanSave(ranks);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  for (auto& c : ranks) std::shuffle(c.regions.begin(), c.regions.end(), rng);
  Result<SavePlan> b = PlanSave(ranks);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(EncodeManifest(a->manifest), EncodeManifest(b->manifest));
  for (size_t r = 0; r < 3; ++r) EXPECT_EQ(a->ranks[r].header, b->ranks[r].header);
}

TEST(PlanSaveTest, ItemsStartAtMultiplesOfTheirElementSize) {
  std::vector<Contribution> ranks(1);
  ranks[0].regions.push_back(R("a", Box::Whole({3}), {3}, DType::kU8));
  ranks[0].regions.push_back(R("b", Box::Whole({3}), {3}, DType::kF64));
  ranks[0].regions.push_back(R("c", Box::Whole({3}), {3}, DType::kBF16));
  ranks[0].objects.push_back(ObjectDesc{"o", {}, {}, 5});
  Result<SavePlan> plan = PlanSave(ranks);
  ASSERT_TRUE(plan.ok());
  for (const WriteItem& item : plan->ranks[0].items) {
    size_t es = item.is_object ? 1 : DTypeSize(plan->manifest.tensors[item.record].dtype);
    EXPECT_EQ(item.offset % es, 0u);
  }
  EXPECT_EQ(plan->ranks[0].header.size() % 4096, 0u);
}

TEST(PlanSaveTest, ZeroElementTensorsAreDeclaredWithoutChunks) {
  std::vector<Contribution> ranks(2);
  ranks[0].regions.push_back(R("empty", Box::Whole({0, 4}), {0, 4}));
  ranks[1].regions.push_back(R("empty", Box::Whole({0, 4}), {0, 4}));
  Result<SavePlan> plan = PlanSave(ranks);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  ASSERT_EQ(plan->manifest.tensors.size(), 1u);
  EXPECT_TRUE(plan->manifest.tensors[0].chunks.empty());
  EXPECT_EQ(plan->ranks[0].file, -1);
}

TEST(PlanSaveTest, ManyRanksPlanQuicklyAndTileChecked) {
  // 512 ranks x 64 tensors, flat-ish row slabs: near-linear planning.
  std::vector<Contribution> ranks(512);
  for (int r = 0; r < 512; ++r) {
    for (int k = 0; k < 64; ++k) {
      ranks[r].regions.push_back(R("k" + std::to_string(k), Box({r, 0}, {1, 64}), {512, 64}));
    }
  }
  Result<SavePlan> plan = PlanSave(ranks);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->manifest.tensors.size(), 64u);
  EXPECT_EQ(plan->manifest.files.size(), 512u);
}

TEST(PlanSaveTest, OverlapInAnyDimIsFound) {
  std::vector<Contribution> ranks(2);
  ranks[0].regions.push_back(R("w", Box({0, 0}, {8, 3})));
  ranks[1].regions.push_back(R("w", Box({0, 2}, {8, 2})));
  Result<SavePlan> plan = PlanSave(ranks);
  EXPECT_THAT(plan.status().message(),
              HasSubstr("box [0:8, 0:3] (rank 0) partially overlaps box [0:8, 2:4] (rank 1)"));
}

TEST(PlanSaveTest, ReplicaListInErrorsNamesAllHolders) {
  std::vector<Contribution> ranks(3);
  ranks[0].regions.push_back(R("w", Rows(0, 5)));
  ranks[1].regions.push_back(R("w", Rows(0, 5)));
  ranks[2].regions.push_back(R("w", Rows(4, 4)));
  Result<SavePlan> plan = PlanSave(ranks);
  EXPECT_THAT(plan.status().message(), HasSubstr("(ranks 0, 1) partially overlaps"));
}

TEST(ContributionTest, RoundTripsAndRejectsTruncation) {
  Contribution c;
  c.regions.push_back(R("a.weight", Rows(0, 2)));
  c.regions.push_back(R("a.weight", Rows(2, 2)));
  c.regions.push_back(R("scalar", Box::Whole({}), {}, DType::kBF16));
  c.objects.push_back(ObjectDesc{"rng", {3}, {8}, 17});
  std::string bytes = EncodeContribution(c);
  Result<Contribution> d = DecodeContribution(bytes, 5);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  ASSERT_EQ(d->regions.size(), 3u);
  EXPECT_EQ(d->regions[1].box, Rows(2, 2));
  EXPECT_EQ(d->regions[2].dtype, DType::kBF16);
  EXPECT_EQ(d->objects[0].nbytes, 17u);
  for (size_t n = 0; n < bytes.size(); ++n) {
    Result<Contribution> t = DecodeContribution(bytes.substr(0, n), 5);
    ASSERT_FALSE(t.ok()) << n;
    EXPECT_EQ(t.status().code(), StatusCode::kDataLoss);
    EXPECT_THAT(t.status().message(), HasSubstr("rank 5"));
  }
  Result<Contribution> trailing = DecodeContribution(bytes + "x", 5);
  EXPECT_EQ(trailing.status().code(), StatusCode::kDataLoss);
  EXPECT_THAT(trailing.status().message(),
              HasSubstr("plan exchange from rank 5: 1 unexpected bytes at byte " +
                        std::to_string(bytes.size())));
}

}  // namespace
}  // namespace shardpoint::internal_plan
