// A key's name goes to its owner only from its designated holders
// (NamesKey): the others send its hash, and the owner still finds every
// error the global planner finds, with the same message.
#include "src/plan/share_codec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "src/plan/dist_plan.h"

namespace shardpoint::internal_plan {
namespace {

const std::string kLong =
    "decoder.layers.79.self_attention.linear_qkv.layer_norm_weight.exp_avg_sq";

RegionDesc R(const std::string& key, int64_t row, Shape shape = {8, 4}, DType dtype = DType::kF32) {
  return RegionDesc{key, dtype, std::move(shape), Box({row, 0}, {2, 4})};
}

std::vector<Contribution> Holders(const std::vector<RegionDesc>& regions) {
  std::vector<Contribution> ranks(regions.size());
  for (size_t r = 0; r < regions.size(); ++r) ranks[r].regions.push_back(regions[r]);
  return ranks;
}

std::string Outcome(const Result<SavePlan>& p) { return p.status().ToString(); }

// A holder off the origin sends the name's hash, not the name: its share
// takes 29 bytes (167 before: the name, 8-byte counts and a nested blob).
TEST(ShareCodecTest, AHolderOffTheOriginSendsTheNamesHashNotTheName) {
  Contribution c;
  c.regions.push_back(R(kLong, 4));
  const std::string share = EncodeShares(c, 1)[0];
  EXPECT_EQ(share.find(kLong), std::string::npos);
  EXPECT_LE(share.size(), 29u);
  c.regions[0] = R(kLong, 0);
  const std::string named = EncodeShares(c, 1)[0];
  EXPECT_NE(named.find(kLong), std::string::npos);
  EXPECT_EQ(named.size(), share.size() + kLong.size() + 4 - 8);  // u32 length + name, not hash
}

TEST(ShareCodecTest, RoundTripsAndResolvesTheNamesFromTheDesignatedHolder) {
  Contribution off, at;
  off.regions = {R(kLong, 4), R(kLong, 6), R("b", 2, {8, 4}, DType::kBF16)};
  at.regions = {R(kLong, 0), R("b", 0, {8, 4}, DType::kBF16)};
  at.objects.push_back(ObjectDesc{"rng", {1}, {2}, 17});
  Result<ShareContribution> a =
      DecodeShareContribution(EncodeShareContribution(off, {0, 1, 5}, {}), 3);
  Result<ShareContribution> b =
      DecodeShareContribution(EncodeShareContribution(at, {2, 3}, {7}), 1);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a->unnamed.size(), 3u);
  EXPECT_EQ(a->unnamed[0], std::make_pair(0u, KeyNameHash(kLong)));
  EXPECT_EQ(a->unnamed[2], std::make_pair(2u, KeyNameHash("b")));
  EXPECT_TRUE(b->unnamed.empty());
  EXPECT_EQ(ResolveNames({{3, &*a}, {1, &*b}}), std::nullopt);
  ASSERT_EQ(a->c.regions.size(), off.regions.size());
  for (size_t i = 0; i < off.regions.size(); ++i) {
    EXPECT_EQ(a->c.regions[i].key, off.regions[i].key);
    EXPECT_EQ(a->c.regions[i].dtype, off.regions[i].dtype);
    EXPECT_EQ(a->c.regions[i].global_shape, off.regions[i].global_shape);
    EXPECT_EQ(a->c.regions[i].box, off.regions[i].box);
  }
  EXPECT_EQ(a->region_index, (std::vector<uint64_t>{0, 1, 5}));
  EXPECT_EQ(b->region_index, (std::vector<uint64_t>{2, 3}));
  EXPECT_EQ(b->object_index, (std::vector<uint64_t>{7}));
  ASSERT_EQ(b->c.objects.size(), 1u);
  EXPECT_EQ(b->c.objects[0].nbytes, 17u);
  const std::string bytes = EncodeShareContribution(off, {0, 1, 5}, {});
  for (size_t n = 0; n < bytes.size(); ++n) {
    Result<ShareContribution> t = DecodeShareContribution(bytes.substr(0, n), 3);
    ASSERT_FALSE(t.ok());
    EXPECT_EQ(t.status().code(), StatusCode::kDataLoss);
    EXPECT_THAT(t.status().message(), ::testing::HasSubstr("rank 3"));
  }
}

// A designated and a non-designated holder disagree on dtype or shape, in
// either rank order: the message PlanSave gives, naming the key and both.
TEST(ShareCodecTest, ADescriptorMismatchWithAHashedHolderNamesTheKeyAndBothRanks) {
  const std::vector<std::vector<RegionDesc>> cases = {
      {R(kLong, 0), R(kLong, 2), R(kLong, 4, {8, 4}, DType::kF16), R(kLong, 6)},
      {R(kLong, 2, {8, 4}, DType::kBF16), R(kLong, 0), R(kLong, 4), R(kLong, 6)},
      {R(kLong, 2), R(kLong, 4, {9, 4}), R(kLong, 0), R(kLong, 6)},
  };
  const std::vector<std::string> want = {
      "rank 0 has F32 " + ShapeToString({8, 4}) + " but rank 2 has F16 " + ShapeToString({8, 4}),
      "rank 0 has BF16 " + ShapeToString({8, 4}) + " but rank 1 has F32 " + ShapeToString({8, 4}),
      "rank 0 has F32 " + ShapeToString({8, 4}) + " but rank 1 has F32 " + ShapeToString({9, 4}),
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    std::vector<Contribution> ranks = Holders(cases[i]);
    Result<SavePlan> global = PlanSave(ranks, true);
    Result<SavePlan> dist = PlanSaveDistributed(ranks, true);
    ASSERT_FALSE(dist.ok());
    EXPECT_EQ(Outcome(dist), Outcome(global));
    EXPECT_THAT(dist.status().message(), ::testing::HasSubstr("tensor '" + kLong + "'"));
    EXPECT_THAT(dist.status().message(), ::testing::HasSubstr(want[i]));
  }
  EXPECT_TRUE(
      PlanSaveDistributed(Holders({R(kLong, 0), R(kLong, 2), R(kLong, 4), R(kLong, 6)}), true)
          .ok());
}

// No holder starts at the origin: nobody sends the name, and the plan still
// fails (the origin element is not covered) with PlanSave's error, naming
// the key (the holders send its name on the error path).
TEST(ShareCodecTest, AKeyNoHolderNamesFailsWithTheGlobalPlannersError) {
  std::vector<Contribution> ranks = Holders({R(kLong, 2), R(kLong, 4), R(kLong, 6)});
  ranks.push_back({});
  ranks.back().regions.push_back(R("ok", 0, {2, 4}));
  Result<SavePlan> global = PlanSave(ranks, true);
  Result<SavePlan> dist = PlanSaveDistributed(ranks, true);
  ASSERT_FALSE(global.ok());
  EXPECT_EQ(Outcome(dist), Outcome(global));
  EXPECT_THAT(dist.status().message(), ::testing::HasSubstr("tensor '" + kLong + "'"));
  EXPECT_THAT(dist.status().message(), ::testing::Not(::testing::HasSubstr("\x1f")));
}

// Two unnamed keys and a named one fail at the same owner: the first by
// name is the global planner's, whatever their placeholders' order.
TEST(ShareCodecTest, UnnamedKeysAtOneOwnerGiveTheFirstErrorByName) {
  for (const std::vector<std::string>& names :
       {std::vector<std::string>{"a", "m", "z"}, std::vector<std::string>{"z", "m", "a"}}) {
    std::vector<Contribution> ranks(1);                  // one owner of every key
    ranks[0].regions = {R(names[0], 2), R(names[1], 4),  // no origin: unnamed
                        R(names[2], 0, {9, 4})};         // named, rows 2-9 missing
    Result<SavePlan> global = PlanSave(ranks, true);
    Result<SavePlan> dist = PlanSaveDistributed(ranks, true);
    ASSERT_FALSE(global.ok());
    EXPECT_EQ(Outcome(dist), Outcome(global));
  }
}

// A nameless key and a dtype mismatch of another key at the same owner: the
// mismatch (a region error) comes first, as in PlanSave.
TEST(ShareCodecTest, AnotherKeysRegionErrorAtTheSameOwnerStillComesFirst) {
  constexpr int kRanks = 4;
  std::string other;
  for (int i = 0; other.empty(); ++i) {
    std::string k = "w" + std::to_string(i);
    if (KeyOwner(k, kRanks) == KeyOwner(kLong, kRanks)) other = k;
  }
  std::vector<Contribution> ranks =
      Holders({R(kLong, 2), R(kLong, 4), R(other, 0), R(other, 2, {8, 4}, DType::kF16)});
  Result<SavePlan> global = PlanSave(ranks, true);
  Result<SavePlan> dist = PlanSaveDistributed(ranks, true);
  ASSERT_FALSE(global.ok());
  EXPECT_EQ(Outcome(dist), Outcome(global));
  EXPECT_THAT(dist.status().message(), ::testing::HasSubstr("tensor '" + other + "'"));
}

}  // namespace
}  // namespace shardpoint::internal_plan
