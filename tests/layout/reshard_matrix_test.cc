// The resharding matrix: one transformer-like model with Adam state (bf16
// parameters; fp32 main params, exp_avg, exp_avg_sq), saved under six
// layouts and loaded into each of them, bit for bit, model and optimizer.
//   TP2 x PP2 x DP2                TP4 x DP2, distributed optimizer
//   FSDP8 flat buffers             FSDP2 x TP2 (_StridedShard, ShardLocal)
//   EP4 x expert-TP2 (MoE layer)   PP4 x 2 virtual stages x DP2, dist. opt.
// Ranks are threads; checkpoints live in an in-memory storage.
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "shardpoint/checkpoint.h"
#include "tests/testing/layout_model.h"

namespace shardpoint {
namespace {

using testing::MatrixLayout;

class ReshardMatrixTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    storage_ = NewMemStorage().release();
    ref_ = new testing::RefModel(testing::MatrixReference(2024));
    for (MatrixLayout from : testing::kAllMatrixLayouts) {
      Result<std::vector<testing::TestRank>> src = testing::BuildMatrixLayout(from, true);
      ASSERT_TRUE(src.ok()) << src.status().ToString();
      for (testing::TestRank& r : *src) {
        Status s = testing::FillFromReference(*ref_, r.state.tensors);
        ASSERT_TRUE(s.ok()) << s.ToString();
      }
      SaveOptions o;
      o.storage = storage_;
      o.verify_replicas = true;  // DP replicas must really be identical
      Status s = testing::SaveRanks(testing::StatesOf(*src), Dir(from), o);
      ASSERT_TRUE(s.ok()) << testing::MatrixLayoutName(from) << ": " << s.ToString();
    }
  }
  static void TearDownTestSuite() {
    delete ref_;
    delete storage_;
  }
  static std::string Dir(MatrixLayout l) { return "/ckpt/" + testing::MatrixLayoutName(l); }

  static Storage* storage_;
  static testing::RefModel* ref_;
};

Storage* ReshardMatrixTest::storage_ = nullptr;
testing::RefModel* ReshardMatrixTest::ref_ = nullptr;

TEST_F(ReshardMatrixTest, EveryLayoutHoldsEveryKeyOnce) {
  // Every layout declares every global tensor of the model, and the
  // checkpoints differ only in how they are chunked.
  for (MatrixLayout l : testing::kAllMatrixLayouts) {
    Result<std::vector<testing::TestRank>> ranks = testing::BuildMatrixLayout(l, true);
    ASSERT_TRUE(ranks.ok()) << ranks.status().ToString();
    std::map<std::string, int> keys;
    for (testing::TestRank& r : *ranks) {
      for (const LocalTensor& t : r.state.tensors) {
        for (const Segment& s : t.segments) keys[s.key] = 1;
      }
    }
    EXPECT_EQ(keys.size(), ref_->size()) << testing::MatrixLayoutName(l);
  }
}

TEST_F(ReshardMatrixTest, EveryLayoutLoadsEveryOtherBitForBit) {
  uint64_t total_bytes = 0;
  for (const auto& [key, t] : *ref_) total_bytes += t.bytes.size();
  int pairs = 0;
  for (MatrixLayout to : testing::kAllMatrixLayouts) {
    for (MatrixLayout from : testing::kAllMatrixLayouts) {
      const std::string what =
          testing::MatrixLayoutName(from) + " -> " + testing::MatrixLayoutName(to);
      Result<std::vector<testing::TestRank>> dst = testing::BuildMatrixLayout(to, false);
      ASSERT_TRUE(dst.ok()) << dst.status().ToString();
      LoadOptions o;
      o.storage = storage_;
      std::vector<LoadResult> results;
      Status s = testing::LoadRanks(testing::StatesOf(*dst), Dir(from), o, &results);
      ASSERT_TRUE(s.ok()) << what << ": " << s.ToString();
      // Every element is held by some rank (each layout also saved, and the
      // save checks the tiling), so all ranks together read at least the
      // whole model.
      uint64_t read = 0;
      for (const LoadResult& lr : results) read += lr.bytes_read;
      EXPECT_GE(read, total_bytes) << what;
      for (size_t r = 0; r < dst->size(); ++r) {
        const State& st = (*dst)[r].state;
        Status c = testing::CheckAgainstReference(*ref_, st.tensors);
        ASSERT_TRUE(c.ok()) << what << ", rank " << r << ": " << c.ToString();
        ASSERT_EQ(st.objects.size(), 1u);
        EXPECT_EQ(st.objects[0].bytes, "dist") << what << ", rank " << r;
        EXPECT_EQ(st.common, "iteration=7") << what << ", rank " << r;
        EXPECT_TRUE(results[r].missing_keys.empty()) << what;
        EXPECT_TRUE(results[r].unexpected_keys.empty()) << what;
      }
      ++pairs;
    }
  }
  EXPECT_EQ(pairs, 36);
}

}  // namespace
}  // namespace shardpoint
