#include "src/local/topology.h"

#include <gtest/gtest.h>

#include <set>

namespace shardpoint::internal_local {
namespace {

TEST(Topology, NodesSortedAndRanksGrouped) {
  auto t = MakeTopology({"b", "a", "b", "a", "c"});
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->nodes, (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(t->node_of_rank, (std::vector<int>{1, 0, 1, 0, 2}));
  EXPECT_EQ(t->ranks_of[0], (std::vector<int>{1, 3}));
  EXPECT_EQ(t->local_index(3), 1);
}

TEST(Topology, BadNodeIdNamesTheRank) {
  auto t = MakeTopology({"a", "b\tc"});
  ASSERT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find("rank 1"), std::string::npos);
  EXPECT_EQ(MakeTopology({""}).status().code(), StatusCode::kInvalidArgument);
}

// Every copy of a file on a distinct node, none on the file's own node, for
// uneven node sizes and every replica count.
TEST(Topology, ReplicasNeverShareANode) {
  auto t = MakeTopology({"n0", "n0", "n0", "n1", "n2", "n2", "n3"});
  ASSERT_TRUE(t.ok());
  for (int replicas = 0; replicas <= 5; ++replicas) {
    for (int r = 0; r < 7; ++r) {
      std::set<int> nodes{t->node_of(r)};
      const std::vector<int> targets = ReplicaTargets(*t, r, replicas);
      EXPECT_EQ(targets.size(), static_cast<size_t>(std::min(replicas, 3)));
      for (int target : targets) EXPECT_TRUE(nodes.insert(t->node_of(target)).second);
    }
  }
}

TEST(Topology, OneNodeHasNoReplicas) {
  auto t = MakeTopology({"x", "x"});
  ASSERT_TRUE(t.ok());
  EXPECT_TRUE(ReplicaTargets(*t, 1, 3).empty());
}

}  // namespace
}  // namespace shardpoint::internal_local
