// The fixture the local tier's tests share (local_tier_test.cc,
// tiered_manager_test.cc): a temporary directory holding one local root per
// node ("node<i>"), and the ranks' states of a small transformer.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>
#include <vector>

#include "shardpoint/storage.h"
#include "tests/testing/transformer.h"

namespace shardpoint::local_testing {

inline const testing::ModelConfig kModel{2, 64, 256, 1000};

class NodesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/shardpoint_local_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
  }
  void TearDown() override { ASSERT_TRUE(DefaultStorage()->RemoveAll(root_).ok()); }

  std::string NodeRoot(int node) const { return root_ + "/node" + std::to_string(node); }

  // Every rank's state under layout p: with `fill`, the reference model of
  // `seed`; else destinations to load into (empty objects and common part;
  // per-rank RNG objects only in the saved world size, 8).
  std::vector<testing::RankState> States(const testing::ParallelConfig& p, uint64_t seed,
                                         bool fill) {
    const testing::RefModel ref = testing::MakeReference(kModel, seed);
    std::vector<testing::RankState> out(p.world());
    for (int r = 0; r < p.world(); ++r) {
      auto rs = testing::BuildRankState(kModel, p, r);
      EXPECT_TRUE(rs.ok()) << rs.status().ToString();
      out[r] = std::move(*rs);
      if (fill) {
        EXPECT_TRUE(testing::FillFromReference(ref, out[r].state.tensors).ok());
      } else {
        if (p.world() != 8) out[r].state.objects.clear();
        for (Object& o : out[r].state.objects) o.bytes.clear();
        out[r].state.common = "";
      }
    }
    return out;
  }

  std::string root_;
};

}  // namespace shardpoint::local_testing
