#include "src/local/recover_plan.h"

#include <gtest/gtest.h>

namespace shardpoint::internal_local {
namespace {

// Two files of two 100-byte units each; nodes a (ranks 0, 1) and b (rank 2).
struct Fixture {
  UnitTable ut;
  Topology t;
  CopyState copies;
  Fixture() {
    ut.units = {{0, 0, 100, 1}, {0, 100, 100, 2}, {1, 0, 100, 3}, {1, 100, 100, 4}};
    ut.file_begin = {0, 2, 4};
    ut.extent = {200, 200};
    t = *MakeTopology({"a", "a", "b"});
    copies.node_holds = {{1, 0}, {1, 1}};  // a holds file 0; b both
  }
};

TEST(RecoverPlan, OwnNodeCopyNeedsNoTransfer) {
  Fixture f;
  Pending p = InitialPending(f.ut, f.t, f.copies, {{0, 1}, {}, {2}});
  EXPECT_TRUE(p.empty());
}

TEST(RecoverPlan, MissingFileServedByAHolderNode) {
  Fixture f;
  Pending p = InitialPending(f.ut, f.t, f.copies, {{2}, {2, 3}, {}});
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0], (std::pair<uint32_t, std::vector<int>>{2, {0, 1}}));
  std::vector<uint32_t> lost;
  std::vector<Transfer> x = AssignServers(f.ut, f.t, f.copies, p, false, &lost);
  ASSERT_EQ(x.size(), 2u);
  EXPECT_TRUE(lost.empty());
  EXPECT_EQ(x[0].source, 1);
  EXPECT_EQ(x[0].server, 2);
  EXPECT_EQ(x[0].receivers, (std::vector<int>{0, 1}));
}

TEST(RecoverPlan, BadCopyGoesToAnotherThenPersistentThenLost) {
  Fixture f;
  f.copies.bad.insert({0, 0});  // a's unit 0 failed
  Pending p = InitialPending(f.ut, f.t, f.copies, {{0}, {}, {}});
  ASSERT_EQ(p.size(), 1u);
  std::vector<uint32_t> lost;
  EXPECT_EQ(AssignServers(f.ut, f.t, f.copies, p, true, &lost)[0].source, 1);
  f.copies.bad.insert({1, 0});
  std::vector<Transfer> x = AssignServers(f.ut, f.t, f.copies, p, true, &lost);
  ASSERT_EQ(x.size(), 1u);
  EXPECT_EQ(x[0].source, kPersistent);
  EXPECT_EQ(x[0].server, 0);  // the lowest receiver reads it
  EXPECT_TRUE(AssignServers(f.ut, f.t, f.copies, p, false, &lost).empty());
  EXPECT_EQ(lost, std::vector<uint32_t>{0});
  lost.clear();
  f.copies.bad.insert({kPersistent, 0});
  EXPECT_TRUE(AssignServers(f.ut, f.t, f.copies, p, true, &lost).empty());
  EXPECT_EQ(lost, std::vector<uint32_t>{0});
}

// Five transfers to rank 1 of units 0-3, 0: the first three served by
// rank 2, the last two by rank 0.
std::vector<Transfer> FiveTransfers() {
  std::vector<Transfer> x(5);
  for (size_t i = 0; i < x.size(); ++i) {
    x[i].unit = static_cast<uint32_t>(i % 4);
    x[i].server = i < 3 ? 2 : 0;
    x[i].receivers = {1};
  }
  return x;
}

TEST(RecoverPlan, RoundsBoundEachServersBytes) {
  Fixture f;
  const std::vector<Transfer> x = FiveTransfers();
  std::vector<std::vector<size_t>> rounds = PackRounds(f.ut, x, 250);
  ASSERT_EQ(rounds.size(), 2u);
  EXPECT_EQ(rounds[0], (std::vector<size_t>{3, 4, 0, 1}));
  EXPECT_EQ(rounds[1], (std::vector<size_t>{2}));
}

TEST(RecoverPlan, UnbufferedTransfersGoInRoundZeroAndCountForNothing) {
  Fixture f;
  const std::vector<Transfer> x = FiveTransfers();
  // Server 2's transfers hold no memory: all in round 0, with server 0's
  // packed by bytes as before.
  std::vector<std::vector<size_t>> rounds =
      PackRounds(f.ut, x, 250, [](const Transfer& t) { return t.server == 2; });
  ASSERT_EQ(rounds.size(), 1u);
  EXPECT_EQ(rounds[0], (std::vector<size_t>{0, 1, 2, 3, 4}));
  rounds = PackRounds(f.ut, x, 1, [](const Transfer& t) { return t.server == 2; });
  ASSERT_EQ(rounds.size(), 2u);
  EXPECT_EQ(rounds[0], (std::vector<size_t>{0, 1, 2, 3}));
  EXPECT_EQ(rounds[1], (std::vector<size_t>{4}));
}

}  // namespace
}  // namespace shardpoint::internal_local
