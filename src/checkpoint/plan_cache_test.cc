// SavePlanCache: an unchanged structure reuses the plan, a changed one
// replans, and both save correct checkpoints.
#include "shardpoint/plan_cache.h"

#include <gtest/gtest.h>

#include "shardpoint/checkpoint.h"
#include "shardpoint/tensor.h"
#include "src/plan/plan_cache.h"
#include "tests/testing/transformer.h"

using shardpoint::testing::ParallelConfig;

namespace shardpoint {
namespace {

using testing::ParallelConfig;

const testing::ModelConfig kModel{2, 32, 64, 100};

// The whole 8 x 8 float tensor "w" at `data` (what layout's WholeTensor
// builds; checkpoint, below layout, builds it itself).
LocalTensor Whole8x8(float* data) {
  Segment seg;
  seg.key = "w";
  seg.global_box = Box::Whole({8, 8});
  seg.local_offset = {0, 0};
  seg.global_shape = {8, 8};
  LocalTensor t;
  t.dtype = DType::kF32;
  t.data = data;
  t.shape = {8, 8};
  t.segments.push_back(std::move(seg));
  return t;
}

TEST(PlanCache, HashCoversRankBoundaries) {
  EXPECT_FALSE(internal_plan::HashContributions({"ab", "c"}) ==
               internal_plan::HashContributions({"a", "bc"}));
  EXPECT_TRUE(internal_plan::HashContributions({"ab", "c"}) ==
              internal_plan::HashContributions({"ab", "c"}));
}

TEST(PlanCache, UnchangedStructureReusesThePlanOnEveryRank) {
  const ParallelConfig p{2, 1, 2, true};
  auto mem = NewMemStorage();
  std::vector<SavePlanCache> caches(p.world());
  auto save = [&](const ParallelConfig& layout, const std::string& dir, uint64_t seed,
                  std::vector<bool>* cached) {
    const testing::RefModel ref = testing::MakeReference(kModel, seed);
    std::vector<testing::RankState> src(layout.world());
    for (int r = 0; r < layout.world(); ++r) {
      auto rs = testing::BuildRankState(kModel, layout, r);
      ASSERT_TRUE(rs.ok());
      src[r] = std::move(*rs);
      ASSERT_TRUE(testing::FillFromReference(ref, src[r].state.tensors).ok());
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
    auto built = testing::BuildRankState(kModel, ParallelConfig{1, 1, 1, false}, 0);
    ASSERT_TRUE(built.ok());
    testing::RankState dst = std::move(*built);
    dst.state.objects.clear();
    LoadOptions lo;
    lo.storage = mem.get();
    lo.allow_unexpected_keys = true;
    auto comm = MakeSingleComm();
    ASSERT_TRUE(Load(dst.state, dir, *comm, lo).ok());
    Status c = testing::CheckAgainstReference(ref, dst.state.tensors);
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

// Each save fills checksums, common state and metadata into its own copy of
// the manifest: the cached plan stays as planned, and a later save that hits
// it stores only its own values.
TEST(PlanCache, SavesNeverChangeTheCachedManifest) {
  auto mem = NewMemStorage();
  SavePlanCache cache;
  auto comm = MakeSingleComm();
  std::vector<float> w(64);
  auto save = [&](const std::string& dir, float fill, std::optional<std::string> common,
                  const std::string& metadata) {
    std::fill(w.begin(), w.end(), fill);
    State state;
    state.tensors.push_back(Whole8x8(w.data()));
    state.common = std::move(common);
    state.metadata_json = metadata;
    SaveOptions o;
    o.storage = mem.get();
    o.plan_cache = &cache;
    Result<SaveStats> st = Save(state, dir, *comm, o);
    ASSERT_TRUE(st.ok()) << st.status().ToString();
    const internal_format::Manifest& cached = cache.impl().owned->manifest;
    EXPECT_FALSE(cached.has_common);
    EXPECT_TRUE(cached.common.empty());
    EXPECT_TRUE(cached.metadata_json.empty());
    for (const internal_format::TensorRecord& t : cached.tensors) {
      for (const internal_format::ChunkRecord& c : t.chunks) {
        EXPECT_EQ(c.checksum, 0u);
        EXPECT_TRUE(c.block_sums.empty());
      }
    }
  };
  save("a", 1.0f, std::string("iteration 1"), "{\"step\": 1}");
  save("b", 2.0f, std::nullopt, "");  // a hit: must not inherit a's common or metadata
  EXPECT_EQ(cache.hits(), 1);

  State back;
  std::vector<float> r(64, 0.0f);
  back.tensors.push_back(Whole8x8(r.data()));
  back.common = std::string("untouched");
  LoadOptions lo;
  lo.storage = mem.get();
  lo.common_optional = true;
  ASSERT_TRUE(Load(back, "b", *comm, lo).ok());
  EXPECT_EQ(r, std::vector<float>(64, 2.0f));
  EXPECT_EQ(back.common, std::nullopt) << "b holds no common state";
  EXPECT_EQ(back.metadata_json, "");
  back.common = std::string();
  ASSERT_TRUE(Load(back, "a", *comm, lo).ok());
  EXPECT_EQ(r, std::vector<float>(64, 1.0f));
  EXPECT_EQ(back.common, std::optional<std::string>("iteration 1"));
  EXPECT_EQ(back.metadata_json, "{\"step\": 1}");
}

}  // namespace
}  // namespace shardpoint
