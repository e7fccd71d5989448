// A failure on one MPI process only, an exception (std::bad_alloc) that once
// escaped the agreements and left the other processes waiting in the next
// collective forever: every rank now returns the same error, for save, load,
// cooperative load and the manager.
// Run: mpirun --allow-run-as-root --oversubscribe -np 3 build-test/one_rank_fails_check
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <new>

#include "shardpoint/checkpoint.h"
#include "shardpoint/manager.h"
#include "tests/mpi/mpi_test_main.h"
#include "tests/testing/throwing_storage.h"

namespace shardpoint {
namespace {

using ::testing::HasSubstr;

using testing::ThrowingStorage;

std::string SharedTempDir(Comm& comm) {
  std::string dir;
  if (comm.rank() == 0) {
    char tmpl[] = "/tmp/shardpoint_mpi_fail_XXXXXX";
    dir = mkdtemp(tmpl) ? tmpl : "";
  }
  EXPECT_TRUE(comm.Broadcast(&dir, 0).ok());
  return dir;
}

// Rank r holds rows [2r, 2r + 2) of "w" [2n, 4] F32.
struct Rows {
  std::vector<float> mem = std::vector<float>(8);
  State state;
  Rows(int r, int n) {
    for (size_t i = 0; i < mem.size(); ++i) mem[i] = static_cast<float>(r * 100 + i);
    LocalTensor t;
    t.data = mem.data();
    t.shape = {2, 4};
    t.segments = {Segment{"w", {2 * n, 4}, Box({2 * r, 0}, {2, 4}), {0, 0}}};
    state.tensors.push_back(t);
  }
};

TEST(OneRankFails, EveryCollectiveReturnsTheErrorOnEveryRank) {
  auto world = MakeMpiComm(MPI_COMM_WORLD);
  ASSERT_NE(world, nullptr);
  const int n = world->size(), rank = world->rank(), bad = n - 1;
  const std::string root = SharedTempDir(*world);
  ASSERT_FALSE(root.empty());
  Rows mine(rank, n);

  // Save: the last rank cannot open its data file.
  ThrowingStorage throwing(DefaultStorage(), "/data/");
  SaveOptions so;
  so.storage = rank == bad ? static_cast<Storage*>(&throwing) : DefaultStorage();
  Status s = Save(mine.state, root + "/bad", *world, so).status();
  EXPECT_EQ(s.code(), StatusCode::kInternal) << s.ToString();
  EXPECT_THAT(s.message(), HasSubstr("rank " + std::to_string(bad) + ": save: writing rank"));
  EXPECT_THAT(s.message(), HasSubstr("out of memory (std::bad_alloc)"));

  // Load and cooperative load: the last rank cannot open the data files.
  ASSERT_TRUE(Save(mine.state, root + "/good", *world).ok());
  for (bool cooperative : {false, true}) {
    LoadOptions lo;
    lo.storage = so.storage;
    lo.cooperative = cooperative;
    s = Load(mine.state, root + "/good", *world, lo).status();
    EXPECT_EQ(s.code(), StatusCode::kInternal) << s.ToString();
    EXPECT_THAT(s.message(), HasSubstr("rank " + std::to_string(bad) + ": "));
    EXPECT_THAT(s.message(), HasSubstr("out of memory (std::bad_alloc)"));
  }

  // The manager: rank 0 cannot write the tracker.
  ThrowingStorage no_tracker(DefaultStorage(), "latest");
  ManagerOptions mo;
  mo.storage = rank == 0 ? static_cast<Storage*>(&no_tracker) : DefaultStorage();
  auto m = CheckpointManager::Open(root + "/run", *world, mo);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  s = (*m)->Save(mine.state, 1, *world).status();
  EXPECT_EQ(s.code(), StatusCode::kInternal) << s.ToString();
  EXPECT_THAT(s.message(),
              HasSubstr("rank 0: checkpoint '" + root + "/run/iter_0000001' committed"));
  m->reset();
  world->Barrier().IgnoreError();
  if (rank == 0) {
    EXPECT_TRUE(DefaultStorage()->RemoveAll(root).ok());
  }
}

}  // namespace
}  // namespace shardpoint

int main(int argc, char** argv) {
  return shardpoint::testing::RunMpiTests(argc, argv, "one_rank_fails_check");
}
