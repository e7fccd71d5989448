#include "src/local/recycle.h"

#include <gtest/gtest.h>

#include "src/io/mem_storage.h"
#include "src/io/path.h"
#include "src/local/inventory.h"
#include "src/local/replica_map.h"

namespace shardpoint::internal_local {
namespace {

using internal_io::JoinPath;

class RecycleTest : public ::testing::Test {
 protected:
  // A local checkpoint directory; committed: with a manifest and a map.
  void Add(int64_t it, bool committed) {
    const std::string dir = IterDir(it);
    ASSERT_TRUE(node_.CreateDirs(JoinPath(dir, "data")).ok());
    ASSERT_TRUE(node_.WriteStringToFile(JoinPath(dir, "data/0.safetensors"), "old bytes").ok());
    if (!committed) return;
    ASSERT_TRUE(node_.WriteStringToFile(JoinPath(dir, "manifest"), "m").ok());
    ASSERT_TRUE(node_.WriteStringToFile(JoinPath(dir, kReplicaMapName), "r").ok());
  }
  std::optional<int64_t> Pick(int64_t it, int keep, std::vector<int64_t> busy = {}) {
    Result<std::optional<int64_t>> r = PickRecyclable(&node_, it, RecyclePolicy{keep, busy});
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : std::nullopt;
  }
  internal_io::MemStorage node_;
};

TEST_F(RecycleTest, PicksWhatRetentionRemovesNextNeverTheNewestCommittedNorABusyOne) {
  EXPECT_EQ(Pick(5, 2), std::nullopt);  // nothing there
  Add(3, true);
  EXPECT_EQ(Pick(5, 1), std::nullopt);  // 3 is the newest committed
  EXPECT_EQ(Pick(5, 2), std::nullopt);  // kept
  Add(1, true);
  Add(2, false);                        // a killed save's leftover
  EXPECT_EQ(Pick(5, 2), 2);             // 3 and 5 kept: the newest below
  EXPECT_EQ(Pick(5, 2, {2}), 1);        // 2 is draining
  EXPECT_EQ(Pick(5, 3), std::nullopt);  // 1, 3 and 5 kept; 2 is newer than 1
  Add(4, true);
  EXPECT_EQ(Pick(5, 3), 2);
  EXPECT_EQ(Pick(5, 1), 3);  // retention keeps 5 only, but never the newest (4)
  EXPECT_EQ(Pick(4, 2), 2);  // saving 4 again: 3 and 4 kept
}

TEST_F(RecycleTest, MoveToSpareUncommitsFirstAndLeavesOnlyTheDataFiles) {
  Add(1, true);
  ASSERT_TRUE(node_.CreateDirs(JoinPath(IterDir(7), "data")).ok());
  ASSERT_TRUE(MoveToSpare(&node_, 1, IterDir(7)).ok());
  EXPECT_FALSE(*node_.Exists(IterDir(1)));
  Result<std::vector<int64_t>> committed = CommittedIterations(&node_);
  ASSERT_TRUE(committed.ok());
  EXPECT_TRUE(committed->empty());
  Result<std::string> spare = node_.ReadFileToString(JoinPath(IterDir(7), "spare/0.safetensors"));
  ASSERT_TRUE(spare.ok()) << spare.status().ToString();
  EXPECT_EQ(*spare, "old bytes");
}

}  // namespace
}  // namespace shardpoint::internal_local
