// SavePlanCache: an unchanged structure reuses the plan, a changed one
// replans, and both save correct checkpoints.
#include "shardpoint/plan_cache.h"

#include <gtest/gtest.h>

#include "shardpoint/checkpoint.h"
#include "src/plan/plan_cache.h"
#include "tests/testing/transformer.h"

namespace shardpoint {
namespace {

using internal::ParallelConfig;

const internal::ModelConfig kModel{2, 32, 64, 100};

TEST(PlanCache, HashCoversRankBoundaries) {
  EXPECT_FALSE(internal::HashContributions({"ab", "c"}) ==
               internal::HashContributions({"a", "bc"}));
  EXPECT_TRUE(internal::HashContributions({"ab", "c"}) == internal::HashContributions({"ab", "c"}));
}

TEST(PlanCache, UnchangedStructureReusesThePlanOnEveryRank) {
  const ParallelConfig p{2, 1, 2, true};
  auto mem = NewMemStorage();
  std::vector<SavePlanCache> caches(p.world());
  auto save = [&](const ParallelConfig& layout, const std::string& dir, uint64_t seed,
                  std::vector<bool>* cached) {
    const internal::RefModel ref = internal::MakeReference(kModel, seed);
    std::vector<internal::RankState> src(layout.world());
    for (int r = 0; r < layout.world(); ++r) {
      auto rs = internal::BuildRankState(kModel, layout, r);
      ASSERT_TRUE(rs.ok());
      src[r] = std::move(*rs);
      ASSERT_TRUE(internal::FillFromReference(ref, src[r].state.tensors).ok());
    }
    cached->assign(layout.world(), false);
    for (const Status& s : RunThreadRanks(layout.world(), [&](Comm& comm) -> Status {
           SaveOptions o;
           o.storage = mem.get();
           o.plan_cache = &caches[comm.rank()];
           SP_ASSIGN_OR_RETURN(SaveStats st, Save(src[comm.rank()].state, dir, comm, o));
           (*cached)[comm.rank()] = st.plan_cached;
           return OkStatus();
         })) {
      ASSERT_TRUE(s.ok()) << s.ToString();
    }
    // Load back into one rank and compare.
    auto built = internal::BuildRankState(kModel, ParallelConfig{1, 1, 1, false}, 0);
    ASSERT_TRUE(built.ok());
    internal::RankState dst = std::move(*built);
    dst.state.objects.clear();
    LoadOptions lo;
    lo.storage = mem.get();
    lo.allow_unexpected_keys = true;
    auto comm = MakeSingleComm();
    ASSERT_TRUE(Load(dst.state, dir, *comm, lo).ok());
    Status c = internal::CheckAgainstReference(ref, dst.state.tensors);
    ASSERT_TRUE(c.ok()) << c.ToString();
  };
  std::vector<bool> cached;
  save(p, "a", 1, &cached);
  EXPECT_EQ(cached, std::vector<bool>(4, false));
  save(p, "b", 2, &cached);  // new bytes, same structure
  EXPECT_EQ(cached, std::vector<bool>(4, true));
  EXPECT_EQ(caches[3].hits(), 1);
  save(ParallelConfig{4, 1, 1, true}, "c", 3, &cached);  // new structure
  EXPECT_EQ(cached, std::vector<bool>(4, false));
  EXPECT_EQ(caches[0].misses(), 2);
}

}  // namespace
}  // namespace shardpoint
