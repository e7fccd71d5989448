// Save and load across MPI processes: every rank writes its own file; a
// checkpoint saved by N processes loads into fewer (sub-communicators) under
// other layouts, bit for bit; a failure on one rank fails every rank, leaves
// no manifest and leaves the previous checkpoint intact.
// Run: mpirun --allow-run-as-root --oversubscribe -np 4 build-test/mpi_checkpoint_check
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>

#include "shardpoint/checkpoint.h"
#include "shardpoint/layout.h"
#include "src/io/fault_storage.h"
#include "tests/mpi/mpi_test_main.h"
#include "tests/testing/transformer.h"

namespace shardpoint {
namespace {

using testing::ParallelConfig;

// A fresh directory made by rank 0 and shared with all ranks.
std::string SharedTempDir(Comm& comm) {
  std::string dir;
  if (comm.rank() == 0) {
    char tmpl[] = "/tmp/shardpoint_mpi_XXXXXX";
    dir = mkdtemp(tmpl) ? tmpl : "";
  }
  EXPECT_TRUE(comm.Broadcast(&dir, 0).ok());
  EXPECT_FALSE(dir.empty());
  return dir;
}

const testing::ModelConfig kModel{4, 64, 192, 500};

testing::RankState Built(const ParallelConfig& p, int rank) {
  auto rs = testing::BuildRankState(kModel, p, rank);
  EXPECT_TRUE(rs.ok()) << rs.status().ToString();
  return std::move(*rs);
}

TEST(MpiCheckpoint, SavedByAllLoadsIntoFewerRanksUnderOtherLayouts) {
  auto world = MakeMpiComm(MPI_COMM_WORLD);
  ASSERT_NE(world, nullptr);
  const int n = world->size(), rank = world->rank();
  const std::string dir = SharedTempDir(*world) + "/ckpt";
  const testing::RefModel ref = testing::MakeReference(kModel, 5);

  testing::RankState src = Built(ParallelConfig{n, 1, 1, false}, rank);
  ASSERT_TRUE(testing::FillFromReference(ref, src.state.tensors).ok());
  Result<SaveStats> saved = Save(src.state, dir, *world);
  ASSERT_TRUE(saved.ok()) << saved.status().ToString();
  EXPECT_EQ(saved->num_files, n);  // every rank wrote its own file

  for (int k = 1; k <= n; ++k) {
    MPI_Comm sub;
    MPI_Comm_split(MPI_COMM_WORLD, rank < k ? 0 : MPI_UNDEFINED, rank, &sub);
    if (rank < k) {
      auto comm = MakeMpiComm(sub);
      for (ParallelConfig to : {ParallelConfig{1, 1, k, true}, ParallelConfig{k, 1, 1, false}}) {
        testing::RankState dst = Built(to, rank);
        dst.state.objects.clear();
        LoadOptions o;
        o.allow_unexpected_keys = true;  // the per-rank RNG objects of the N savers
        Result<LoadResult> r = Load(dst.state, dir, *comm, o);
        ASSERT_TRUE(r.ok()) << "k=" << k << ": " << r.status().ToString();
        EXPECT_EQ(r->unexpected_keys, std::vector<std::string>{"rng_state"});
        Status c = testing::CheckAgainstReference(ref, dst.state.tensors);
        EXPECT_TRUE(c.ok()) << "k=" << k << " " << to.ToString() << ": " << c.ToString();
      }
      comm.reset();
      MPI_Comm_free(&sub);
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
  if (rank == 0) {
    EXPECT_TRUE(DefaultStorage()->RemoveAll(dir.substr(0, dir.size() - 5)).ok());
  }
}

TEST(MpiCheckpoint, BadLayoutOnOneRankFailsEveryRankWithItsError) {
  auto world = MakeMpiComm(MPI_COMM_WORLD);
  const int n = world->size(), rank = world->rank();
  const std::string dir = SharedTempDir(*world) + "/ckpt";
  std::vector<float> mem(4);
  State st;
  // Rank n-1 claims a box outside the tensor.
  int64_t row = rank == n - 1 ? n : rank;
  st.tensors.push_back(LocalTensor{DType::kF32,
                                   mem.data(),
                                   {1, 4},
                                   {},
                                   {Segment{"w", {n, 4}, Box({row, 0}, {1, 4}), {0, 0}}},
                                   {}});
  Result<SaveStats> s = Save(st, dir, *world);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.status().message(), ::testing::HasSubstr("rank " + std::to_string(n - 1) + ": "));
  EXPECT_FALSE(*DefaultStorage()->Exists(dir + "/manifest"));
  world->Barrier().IgnoreError();
  if (rank == 0) {
    EXPECT_TRUE(DefaultStorage()->RemoveAll(dir.substr(0, dir.size() - 5)).ok());
  }
}

TEST(MpiCheckpoint, IoFailureOnOneRankKeepsThePreviousCheckpoint) {
  auto world = MakeMpiComm(MPI_COMM_WORLD);
  const int n = world->size(), rank = world->rank();
  const std::string dir = SharedTempDir(*world) + "/ckpt";
  std::vector<float> mem(4, 1.0f);
  auto state = [&] {
    State st;
    st.tensors.push_back(LocalTensor{DType::kF32,
                                     mem.data(),
                                     {1, 4},
                                     {},
                                     {Segment{"w", {n, 4}, Box({rank, 0}, {1, 4}), {0, 0}}},
                                     {}});
    return st;
  };
  ASSERT_TRUE(Save(state(), dir, *world).ok());

  // Overwrite with new values; the last rank's disk fails.
  mem.assign(4, 2.0f);
  internal_io::FaultStorage faults(DefaultStorage());
  if (rank == n - 1) faults.FailWritesFrom(1);
  SaveOptions o;
  o.overwrite = true;
  o.storage = &faults;
  Result<SaveStats> s = Save(state(), dir, *world, o);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kIOError);
  EXPECT_THAT(s.status().message(), ::testing::HasSubstr("rank " + std::to_string(n - 1) + ": "));

  // The previous checkpoint still loads, with the old values.
  mem.assign(4, 0.0f);
  State st = state();
  ASSERT_TRUE(Load(st, dir, *world).ok());
  EXPECT_EQ(mem, std::vector<float>(4, 1.0f));
  world->Barrier().IgnoreError();
  if (rank == 0) {
    EXPECT_TRUE(DefaultStorage()->RemoveAll(dir.substr(0, dir.size() - 5)).ok());
  }
}

}  // namespace
}  // namespace shardpoint

int main(int argc, char** argv) {
  return shardpoint::testing::RunMpiTests(argc, argv, "mpi_checkpoint_check");
}
