// End to end on the real filesystem: a transformer-like model with Adam state
// saved under one Megatron-style layout and loaded under others, bit for bit.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "shardpoint/checkpoint.h"
#include "tests/testing/transformer.h"

namespace shardpoint {
namespace {

using testing::ParallelConfig;

class ReshardTest : public ::testing::TestWithParam<std::pair<ParallelConfig, ParallelConfig>> {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/shardpoint_reshard_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = std::string(tmpl) + "/ckpt";
  }
  void TearDown() override {
    ASSERT_TRUE(DefaultStorage()->RemoveAll(dir_.substr(0, dir_.size() - 5)).ok());
  }
  std::string dir_;
};

Status First(const std::vector<Status>& all) {
  for (const Status& s : all) {
    if (!s.ok()) return s;
  }
  return OkStatus();
}

TEST_P(ReshardTest, LoadsBitForBit) {
  const auto& [from, to] = GetParam();
  testing::ModelConfig model{4, 64, 256, 1000};  // vocab 1000: uneven TP splits
  const testing::RefModel ref = testing::MakeReference(model, 99);

  std::vector<testing::RankState> src(from.world());
  for (int r = 0; r < from.world(); ++r) {
    auto rs = testing::BuildRankState(model, from, r);
    ASSERT_TRUE(rs.ok()) << rs.status().ToString();
    src[r] = std::move(*rs);
    ASSERT_TRUE(testing::FillFromReference(ref, src[r].state.tensors).ok());
  }
  ASSERT_TRUE(First(RunThreadRanks(from.world(), [&](Comm& comm) {
                return Save(src[comm.rank()].state, dir_, comm).status();
              })).ok());

  std::vector<testing::RankState> dst(to.world());
  for (int r = 0; r < to.world(); ++r) {
    auto rs = testing::BuildRankState(model, to, r);
    ASSERT_TRUE(rs.ok());
    dst[r] = std::move(*rs);
    // Per-rank RNG state only makes sense in the same world size.
    if (to.world() != from.world()) dst[r].state.objects.clear();
    for (Object& obj : dst[r].state.objects) obj.bytes.clear();
    dst[r].state.common = "";
  }
  LoadOptions o;
  o.allow_unexpected_keys = to.world() != from.world();
  const std::vector<std::string> unexpected =
      o.allow_unexpected_keys ? std::vector<std::string>{"rng_state"} : std::vector<std::string>{};
  Status s = First(RunThreadRanks(to.world(), [&](Comm& comm) {
    auto r = Load(dst[comm.rank()].state, dir_, comm, o);
    if (r.ok() && r->unexpected_keys != unexpected) return InternalError("unexpected keys wrong");
    return r.status();
  }));
  ASSERT_TRUE(s.ok()) << s.ToString();
  for (int r = 0; r < to.world(); ++r) {
    Status c = testing::CheckAgainstReference(ref, dst[r].state.tensors);
    ASSERT_TRUE(c.ok()) << "rank " << r << ": " << c.ToString();
    EXPECT_EQ(*dst[r].state.common, "{\"iteration\": 1000}");
    if (to.world() == from.world()) {
      EXPECT_EQ(dst[r].state.objects[0].bytes, "rng-of-rank-" + std::to_string(r));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, ReshardTest,
    ::testing::Values(std::make_pair(ParallelConfig{2, 2, 2, true}, ParallelConfig{4, 1, 2, true}),
                      std::make_pair(ParallelConfig{2, 2, 2, true}, ParallelConfig{1, 1, 1, false}),
                      std::make_pair(ParallelConfig{4, 1, 2, false}, ParallelConfig{2, 4, 1, true}),
                      std::make_pair(ParallelConfig{1, 1, 8, true}, ParallelConfig{8, 1, 1, false}),
                      std::make_pair(ParallelConfig{1, 2, 3, true}, ParallelConfig{3, 1, 2, true})),
    [](const auto& info) {
      auto name = [](const ParallelConfig& p) {
        return "TP" + std::to_string(p.tp) + "PP" + std::to_string(p.pp) + "DP" +
               std::to_string(p.dp) + (p.distributed_optimizer ? "dist" : "");
      };
      return name(info.param.first) + "_to_" + name(info.param.second);
    });

}  // namespace
}  // namespace shardpoint
