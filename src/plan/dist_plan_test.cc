// The distributed planner (each key checked by its owner) finds the errors
// the global planner (PlanSave over everyone's contributions) finds, with the
// same message naming the same ranks, and plans the same manifest records.
#include "src/plan/dist_plan.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>
#include <tuple>

namespace shardpoint::internal_plan {
namespace {

RegionDesc R(const std::string& key, Box box, Shape shape = {8, 4}, DType dtype = DType::kF32) {
  return RegionDesc{key, dtype, std::move(shape), std::move(box)};
}

Box Rows(int64_t begin, int64_t n, int64_t cols = 4) { return Box({begin, 0}, {n, cols}); }

// Both planners' outcome: the same status, and where OK the same records
// (keys, dtypes, shapes, chunk boxes, objects) with every chunk written once.
void ExpectSamePlan(const std::vector<Contribution>& ranks, bool list_replicas = true) {
  Result<SavePlan> global = PlanSave(ranks, list_replicas);
  std::vector<LocalPlan> local;
  Result<SavePlan> dist = PlanSaveDistributed(ranks, list_replicas, &local);
  ASSERT_EQ(dist.status().ToString(), global.status().ToString());
  if (!global.ok()) return;
  const auto& g = global->manifest;
  const auto& d = dist->manifest;
  ASSERT_EQ(d.tensors.size(), g.tensors.size());
  for (size_t t = 0; t < g.tensors.size(); ++t) {
    EXPECT_EQ(d.tensors[t].key, g.tensors[t].key);
    EXPECT_EQ(d.tensors[t].dtype, g.tensors[t].dtype);
    EXPECT_EQ(d.tensors[t].shape, g.tensors[t].shape);
    ASSERT_EQ(d.tensors[t].chunks.size(), g.tensors[t].chunks.size());
    for (size_t c = 0; c < g.tensors[t].chunks.size(); ++c) {
      EXPECT_EQ(d.tensors[t].chunks[c].box, g.tensors[t].chunks[c].box);
    }
  }
  ASSERT_EQ(d.objects.size(), g.objects.size());
  for (size_t o = 0; o < g.objects.size(); ++o) {
    EXPECT_EQ(d.objects[o].key, g.objects[o].key);
    EXPECT_EQ(d.objects[o].index, g.objects[o].index);
  }
  EXPECT_EQ(dist->total_bytes, global->total_bytes);
  // Each rank's own plan lists the replicas it holds (rank 0's lists none:
  // the keys' owners compare them, src/checkpoint/replica_owners.h), and
  // the writers mark each piece that has replicas, once.
  ASSERT_EQ(local.size(), global->ranks.size());
  std::set<std::tuple<bool, int64_t, int64_t>> replicated;
  size_t shared = 0, replicas_g = 0, replicas_d = 0;
  for (size_t r = 0; r < local.size(); ++r) {
    replicas_g += global->ranks[r].replicas.size();
    replicas_d += local[r].file.replicas.size();
    EXPECT_TRUE(dist->ranks[r].replicas.empty());
    for (const WriteItem& rep : global->ranks[r].replicas) {
      replicated.emplace(rep.is_object, rep.record, rep.chunk);
    }
    shared += local[r].shared.size();
  }
  EXPECT_EQ(replicas_d, replicas_g);
  EXPECT_EQ(shared, replicated.size());
}

// Seven ranks and keys whose owners differ: row blocks of "a".."f" spread
// over the ranks, each block held by one or more ranks.
std::vector<Contribution> Spread(uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<Contribution> ranks(7);
  for (const char* key : {"a", "b", "c", "d", "e", "f"}) {
    for (int block = 0; block < 4; ++block) {
      const int holders = 1 + static_cast<int>(rng() % 3);
      for (int h = 0; h < holders; ++h) {
        ranks[rng() % 7].regions.push_back(R(key, Rows(2 * block, 2)));
      }
    }
  }
  for (int r = 0; r < 7; ++r) {
    ranks[r].objects.push_back(ObjectDesc{"rng", {r}, {7}, 16});
    ranks[r].objects.push_back(ObjectDesc{"opt", {}, {}, 8});
  }
  return ranks;
}

TEST(DistPlanTest, PlansWhatTheGlobalPlannerPlans) {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    SCOPED_TRACE(seed);
    ExpectSamePlan(Spread(seed));
    ExpectSamePlan(Spread(seed), /*list_replicas=*/false);
  }
}

TEST(DistPlanTest, EveryChunkHasOneWriterAndReplicasSpreadOverHolders) {
  // One 8-row tensor per key, whole on each of 4 ranks: the writer of each
  // key is one of its holders, and not always the same rank.
  std::vector<Contribution> ranks(4);
  for (int k = 0; k < 16; ++k) {
    for (auto& c : ranks) c.regions.push_back(R("k" + std::to_string(k), Rows(0, 8)));
  }
  std::vector<LocalPlan> local;
  Result<SavePlan> plan = PlanSaveDistributed(ranks, true, &local);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  int writers = 0;
  size_t items = 0;
  for (const LocalPlan& lp : local) {
    writers += !lp.file.items.empty();
    items += lp.file.items.size();
    EXPECT_EQ(lp.file.items.size() + lp.file.replicas.size(), 16u);
  }
  EXPECT_EQ(items, 16u);
  EXPECT_GE(writers, 3) << "replicated keys should not all be written by one rank";
}

TEST(DistPlanTest, OverlapNamesBothRanksAsTheGlobalPlannerDoes) {
  std::vector<Contribution> ranks = Spread(3);
  ranks[5].regions.push_back(R("c", Rows(1, 2)));  // straddles blocks 0 and 1
  ExpectSamePlan(ranks);
  Result<SavePlan> dist = PlanSaveDistributed(ranks, true);
  EXPECT_THAT(dist.status().message(), ::testing::HasSubstr("partially overlaps"));
}

TEST(DistPlanTest, GapDtypeShapeAndOutsideBoxAsTheGlobalPlanner) {
  std::vector<Contribution> gap = Spread(4);
  for (auto& c : gap)
    std::erase_if(c.regions,
                  [](const RegionDesc& r) { return r.key == "e" && r.box.offset[0] == 4; });
  ExpectSamePlan(gap);
  std::vector<Contribution> dtype = Spread(5);
  dtype[6].regions.push_back(R("b", Rows(0, 2), {8, 4}, DType::kI32));
  ExpectSamePlan(dtype);
  std::vector<Contribution> shape = Spread(6);
  shape[2].regions.push_back(R("a", Rows(0, 2), {9, 4}));
  ExpectSamePlan(shape);
  std::vector<Contribution> outside = Spread(7);
  outside[4].regions.push_back(R("d", Rows(7, 2)));
  ExpectSamePlan(outside);
  std::vector<Contribution> object = Spread(8);
  object[3].objects.push_back(ObjectDesc{"opt", {}, {}, 9});
  ExpectSamePlan(object);
}

// Several errors at once, in keys with different owners: every planner and
// every rank reports the one the global planner meets first.
TEST(DistPlanTest, ManyErrorsAgreeOnTheGlobalPlannersFirst) {
  std::mt19937_64 rng(42);
  for (int trial = 0; trial < 30; ++trial) {
    SCOPED_TRACE(trial);
    std::vector<Contribution> ranks = Spread(100 + trial);
    const int errors = 1 + static_cast<int>(rng() % 3);
    for (int e = 0; e < errors; ++e) {
      const std::string key(1, static_cast<char>('a' + rng() % 6));
      const int r = static_cast<int>(rng() % 7);
      switch (rng() % 4) {
        case 0:
          ranks[r].regions.push_back(R(key, Rows(1, 2)));
          break;
        case 1:
          ranks[r].regions.push_back(R(key, Rows(0, 2), {8, 4}, DType::kF16));
          break;
        case 2:
          ranks[r].regions.push_back(R(key, Rows(0, 2, 3)));
          break;  // collision
        default:
          ranks[r].objects.push_back(ObjectDesc{"rng", {r}, {7}, 17});
          break;
      }
    }
    Result<SavePlan> global = PlanSave(ranks, true);
    ASSERT_FALSE(global.ok());
    std::vector<LocalPlan> local;
    Result<SavePlan> dist = PlanSaveDistributed(ranks, true, &local);
    EXPECT_EQ(dist.status().ToString(), global.status().ToString());
  }
}

// An object every rank holds a piece of (each rank's RNG) goes to the owners
// of its (key, index), not all to one owner: at 65,536 ranks that one owner
// received 7.3 MB. The checks stay the global planner's: the same plan, and
// the same error for two ranks that disagree on one index's grid.
TEST(DistPlanTest, ARankPieceOfAnObjectGoesToTheOwnerOfItsIndex) {
  constexpr int kRanks = 256;
  std::vector<Contribution> ranks(kRanks);
  for (int r = 0; r < kRanks; ++r)
    ranks[r].objects.push_back(ObjectDesc{"rng_state", {r}, {kRanks}, 32});
  std::vector<int> shares(kRanks, 0);
  for (int r = 0; r < kRanks; ++r) {
    std::vector<std::string> out = EncodeShares(ranks[r], kRanks);
    for (int o = 0; o < kRanks; ++o) shares[o] += out[o].empty() ? 0 : 1;
  }
  EXPECT_LE(*std::max_element(shares.begin(), shares.end()), 8);
  EXPECT_EQ(ObjectOwner("rng_state", {}, kRanks), KeyOwner("rng_state", kRanks));
  ExpectSamePlan(ranks);
  ranks[9].objects.push_back(ObjectDesc{"rng_state", {3}, {kRanks + 1}, 32});
  ExpectSamePlan(ranks);
  EXPECT_THAT(PlanSaveDistributed(ranks, true).status().message(),
              ::testing::HasSubstr("rank 3 has grid [256]"));
}

// A key's owner receives a share from every rank holding the key (4,096 at
// 65,536 ranks): a 2-D region is a varint key index and box, ~6 bytes, and a
// 4-byte index (52 + 8 before); large or negative values still round-trip.
TEST(DistPlanTest, ASharePerRegionIsAFewBytes) {
  Contribution c;
  for (int64_t i = 0; i < 1000; ++i) {
    c.regions.push_back(R("decoder.layers.0.mlp.linear_fc1.weight", Rows(i, 1), {1000, 4}));
  }
  const std::string share = EncodeShares(c, 1)[0];
  EXPECT_LE(share.size(), 1000u * 12 + 200);  // 46 KB before
  Contribution big;
  big.regions.push_back(R("h", Box({int64_t{1} << 40, 0}, {3, 4}), {(int64_t{1} << 40) + 3, 4}));
  big.regions.push_back(R("n", Box({-1, 0}, {2, 4}), {8, 4}));
  Result<Contribution> back = DecodeContribution(EncodeContribution(big), 0);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->regions[0].box, big.regions[0].box);
  EXPECT_EQ(back->regions[1].box, big.regions[1].box);
  std::vector<Contribution> ranks(3, c);
  ExpectSamePlan(ranks);
}

}  // namespace
}  // namespace shardpoint::internal_plan
