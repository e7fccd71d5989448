// Async save and the checkpoint manager across MPI processes: tensors are
// modified right after SaveAsync and the checkpoint holds the values of the
// call; a failure on one rank surfaces at Wait() on every rank; resume skips a
// killed save; retention; only one job holds the directory.
// Run: mpirun --oversubscribe -np 4 build/async_manager_check
// (Its main asks for MPI_THREAD_MULTIPLE: the save runs in a background thread.)
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "shardpoint/async_save.h"
#include "shardpoint/manager.h"
#include "shardpoint/mpi_comm.h"
#include "tests/mpi/mpi_test_main.h"
#include "tests/testing/transformer.h"

namespace shardpoint {
namespace {

using ::testing::HasSubstr;
using testing::ParallelConfig;

const testing::ModelConfig kModel{4, 64, 192, 500};

std::string SharedTempDir(Comm& comm) {
  std::string dir;
  if (comm.rank() == 0) {
    char tmpl[] = "/tmp/shardpoint_mpi_async_XXXXXX";
    dir = mkdtemp(tmpl) ? tmpl : "";
  }
  EXPECT_TRUE(comm.Broadcast(&dir, 0).ok());
  return dir;
}

testing::RankState Built(const ParallelConfig& p, int rank, const testing::RefModel* ref) {
  auto rs = testing::BuildRankState(kModel, p, rank);
  EXPECT_TRUE(rs.ok()) << rs.status().ToString();
  if (ref) {
    EXPECT_TRUE(testing::FillFromReference(*ref, rs->state.tensors).ok());
  }
  return std::move(*rs);
}

void Scribble(testing::RankState& rs) {
  for (const LocalTensor& t : rs.state.tensors) {
    int64_t n = t.flat ? t.flat->size() : Box::Whole(t.shape).num_elements();
    std::memset(t.data, 0x5A, static_cast<size_t>(n) * DTypeSize(t.dtype));
  }
}

// Loads `iteration`'s checkpoint into the first k ranks (TP=k) and checks it.
void CheckLoads(const std::string& dir, const testing::RefModel& ref, int k) {
  int rank;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm sub;
  MPI_Comm_split(MPI_COMM_WORLD, rank < k ? 0 : MPI_UNDEFINED, rank, &sub);
  if (rank < k) {
    auto comm = MakeMpiComm(sub);
    testing::RankState dst = Built(ParallelConfig{k, 1, 1, false}, rank, nullptr);
    dst.state.objects.clear();
    LoadOptions o;
    o.allow_unexpected_keys = true;
    Result<LoadResult> r = Load(dst.state, dir, *comm, o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    Status c = testing::CheckAgainstReference(ref, dst.state.tensors);
    EXPECT_TRUE(c.ok()) << c.ToString();
    comm.reset();
    MPI_Comm_free(&sub);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(MpiAsync, TensorsModifiedRightAfterSaveAsyncLoadAsSnapshot) {
  auto world = MakeMpiComm(MPI_COMM_WORLD);
  const int n = world->size(), rank = world->rank();
  const std::string root = SharedTempDir(*world);
  const testing::RefModel ref = testing::MakeReference(kModel, 11);
  testing::RankState src = Built(ParallelConfig{1, 1, n, true}, rank, &ref);

  ManagerOptions mo;
  mo.keep_last = 2;
  auto manager = CheckpointManager::Open(root, *world, mo);
  ASSERT_TRUE(manager.ok()) << manager.status().ToString();
  AsyncSaver saver;
  SaveHandle h = (*manager)->SaveAsync(saver, src.state, 100, *world);
  Scribble(src);  // training goes on while the save writes
  Result<SaveStats> st = h.Wait();
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_EQ(st->num_files, n);
  EXPECT_EQ(**(*manager)->Tracker(), 100);
  CheckLoads((*manager)->PathFor(100), ref, std::max(1, n - 1));
  manager->reset();
  if (rank == 0) {
    EXPECT_TRUE(DefaultStorage()->RemoveAll(root).ok());
  }
}

TEST(MpiAsync, FailureOnOneRankSurfacesAtWaitOnEveryRank) {
  auto world = MakeMpiComm(MPI_COMM_WORLD);
  const int n = world->size(), rank = world->rank();
  const std::string root = SharedTempDir(*world);
  testing::RankState src = Built(ParallelConfig{1, 1, n, true}, rank, nullptr);
  // The last rank's staging pool is too small.
  AsyncSaver saver(AsyncSaverOptions{rank == n - 1 ? uint64_t{4096} : 0});
  SaveHandle h = SaveAsync(saver, src.state, root + "/ckpt", *world);
  Status s = h.Wait().status();
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
  EXPECT_THAT(s.message(), HasSubstr("rank " + std::to_string(n - 1) + ": "));
  EXPECT_FALSE(*DefaultStorage()->Exists(root + "/ckpt/manifest"));
  world->Barrier().IgnoreError();
  if (rank == 0) {
    EXPECT_TRUE(DefaultStorage()->RemoveAll(root).ok());
  }
}

TEST(MpiManager, ResumeSkipsAKilledSaveRetentionAndTheLock) {
  auto world = MakeMpiComm(MPI_COMM_WORLD);
  const int n = world->size(), rank = world->rank();
  const std::string root = SharedTempDir(*world);
  ManagerOptions mo;
  mo.keep_last = 2;
  auto manager = CheckpointManager::Open(root, *world, mo);
  ASSERT_TRUE(manager.ok()) << manager.status().ToString();
  CheckpointManager& m = **manager;

  // A second job on the same directory is refused, on every one of its ranks.
  auto second = CheckpointManager::Open(root, *world);
  ASSERT_FALSE(second.ok());
  EXPECT_THAT(second.status().message(), HasSubstr("locked by another job"));

  testing::RefModel refs[3];
  for (int i = 0; i < 3; ++i) {
    refs[i] = testing::MakeReference(kModel, 20 + i);
    testing::RankState src = Built(ParallelConfig{n, 1, 1, false}, rank, &refs[i]);
    ASSERT_TRUE(m.Save(src.state, 100 * (i + 1), *world).ok());
  }
  EXPECT_EQ(*m.CompleteIterations(), (std::vector<int64_t>{200, 300}));

  // A save of 400 killed before its commit: data files, no manifest.
  if (rank == 0) {
    ASSERT_TRUE(DefaultStorage()->CreateDirs(m.PathFor(400) + "/data").ok());
    ASSERT_TRUE(
        DefaultStorage()->WriteStringToFile(m.PathFor(400) + "/data/0.safetensors", "x").ok());
  }
  world->Barrier().IgnoreError();
  testing::RankState dst = Built(ParallelConfig{1, 1, n, true}, rank, nullptr);
  dst.state.objects.clear();
  LoadOptions o;
  o.allow_unexpected_keys = true;
  Result<int64_t> it = m.Resume(dst.state, *world, o);
  ASSERT_TRUE(it.ok()) << it.status().ToString();
  EXPECT_EQ(*it, 300);
  Status c = testing::CheckAgainstReference(refs[2], dst.state.tensors);
  EXPECT_TRUE(c.ok()) << c.ToString();
  manager->reset();
  world->Barrier().IgnoreError();
  if (rank == 0) {
    EXPECT_TRUE(DefaultStorage()->RemoveAll(root).ok());
  }
}

}  // namespace
}  // namespace shardpoint

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  if (provided < MPI_THREAD_SERIALIZED) {
    std::fprintf(stderr, "async_manager_check: MPI gives thread level %d, need SERIALIZED\n",
                 provided);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  ::testing::InitGoogleTest(&argc, argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new shardpoint::testing::FailurePrinter(rank));
  }
  int failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  int any_failed = 0;
  MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return any_failed;
}
