// Distributed save planning under mpirun: each key's regions are checked by
// the key's owner, and every rank fails with the error the all-gather planner
// (PlanSave over every rank's contribution) gives, naming the same ranks:
// an overlap, a collision of two ranks' boxes, a gap at a key's origin, disagreeing replicas
// (dtype, and bytes with verify_replicas); a good save still loads back bit for bit. Run: mpirun
// --allow-run-as-root --oversubscribe -np 3 build-test/dist_plan_check
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>

#include "shardpoint/checkpoint.h"
#include "src/plan/dist_plan.h"
#include "src/plan/regions.h"
#include "src/plan/save_plan.h"
#include "tests/mpi/mpi_test_main.h"

namespace shardpoint {
namespace {

using ::testing::HasSubstr;

std::string SharedTempDir(Comm& comm) {
  std::string dir;
  if (comm.rank() == 0) {
    char tmpl[] = "/tmp/shardpoint_mpi_dist_XXXXXX";
    dir = mkdtemp(tmpl) ? tmpl : "";
  }
  EXPECT_TRUE(comm.Broadcast(&dir, 0).ok());
  return dir;
}

struct Tensor {
  std::vector<float> mem;
  LocalTensor t;
};

// `rows` rows of `cols` columns at `row0` of key [grows, 4], filled from `seed`.
Tensor Part(const std::string& key, int64_t grows, int64_t row0, int64_t rows, int64_t cols,
            float seed, DType dtype = DType::kF32) {
  Tensor x;
  x.mem.assign(rows * cols, 0.f);
  for (size_t i = 0; i < x.mem.size(); ++i) x.mem[i] = seed + static_cast<float>(i);
  x.t.dtype = dtype;
  x.t.data = x.mem.data();
  x.t.shape = {rows, cols};
  x.t.segments = {Segment{key, {grows, 4}, Box({row0, 0}, {rows, cols}), {0, 0}}};
  return x;
}

// Rank r's good state: rows [2r, 2r + 2) of "w" [2n, 4], the whole "r" [4, 4]
// (a replica on every rank) and its own key "k<r>".
std::vector<Tensor> Good(int r, int n) {
  std::vector<Tensor> ts;
  ts.push_back(Part("w", 2 * n, 2 * r, 2, 4, 100.f * r));
  ts.push_back(Part("r", 4, 0, 4, 4, 7.f));
  ts.push_back(Part("k" + std::to_string(r), 2, 0, 2, 4, 1000.f * r));
  return ts;
}

// Every rank's contribution, all-gathered (the planner before the owners).
std::vector<internal_plan::Contribution> AllContributions(Comm& comm, const State& state) {
  auto regions = internal_plan::BuildRegions(state.tensors);
  EXPECT_TRUE(regions.ok());
  internal_plan::Contribution c;
  for (const auto& r : *regions) c.regions.push_back(r.desc);
  std::vector<std::string> all;
  EXPECT_TRUE(comm.AllGather(internal_plan::EncodeContribution(c), &all).ok());
  std::vector<internal_plan::Contribution> cs;
  for (size_t r = 0; r < all.size(); ++r) {
    cs.push_back(*internal_plan::DecodeContribution(all[r], static_cast<int>(r)));
  }
  return cs;
}

// What the all-gather planner says of every rank's tensors.
Status GlobalPlanError(Comm& comm, const State& state, bool list_replicas) {
  return internal_plan::PlanSave(AllContributions(comm, state), list_replicas).status();
}

// The rank the distributed planner makes write `key` (every rank's
// contribution gathered, as GlobalPlanError does).
int WriterOf(Comm& comm, const State& state, const std::string& key) {
  std::vector<internal_plan::Contribution> cs = AllContributions(comm, state);
  std::vector<internal_plan::LocalPlan> local;
  EXPECT_TRUE(internal_plan::PlanSaveDistributed(cs, true, &local).ok());
  for (size_t r = 0; r < local.size(); ++r) {
    for (const internal_plan::WriteItem& item : local[r].file.items) {
      if (!item.is_object && cs[r].regions[item.source].key == key) return static_cast<int>(r);
    }
  }
  ADD_FAILURE() << "no rank writes " << key;
  return -1;
}

// Saves `ts` on every rank; every rank's status must be the same.
Status SaveAll(Comm& comm, std::vector<Tensor>& ts, const std::string& dir, State* state) {
  for (Tensor& x : ts) state->tensors.push_back(x.t);
  Status s = Save(*state, dir, comm, SaveOptions{}).status();
  std::vector<std::string> all;
  EXPECT_TRUE(comm.AllGather(s.ToString(), &all).ok());
  for (const std::string& a : all) EXPECT_EQ(a, s.ToString());
  return s;
}

void ExpectGlobalError(Comm& comm, std::vector<Tensor> ts, const std::string& dir) {
  State state;
  Status s = SaveAll(comm, ts, dir, &state);
  Status global = GlobalPlanError(comm, state, true);
  ASSERT_FALSE(global.ok());
  EXPECT_EQ(s.code(), global.code());
  EXPECT_EQ(s.message(), "rank 0: " + global.message());
}

TEST(DistPlan, ErrorsAreTheAllGatherPlannersOnEveryRank) {
  auto world = MakeMpiComm(MPI_COMM_WORLD);
  ASSERT_NE(world, nullptr);
  const int n = world->size(), rank = world->rank(), last = n - 1;
  const std::string root = SharedTempDir(*world);
  ASSERT_FALSE(root.empty());

  // Overlap: the last rank's rows of "w" start one row early.
  std::vector<Tensor> overlap = Good(rank, n);
  if (rank == last) overlap[0] = Part("w", 2 * n, 2 * last - 1, 2, 4, 0.f);
  ExpectGlobalError(*world, std::move(overlap), root + "/overlap");

  // Collision: the last rank also claims three columns of rank 0's key.
  std::vector<Tensor> collision = Good(rank, n);
  if (rank == last) collision.push_back(Part("k0", 2, 0, 2, 3, 0.f));
  ExpectGlobalError(*world, std::move(collision), root + "/collision");

  // A gap at the origin: rank 0's rows of "w" start one row late, so no
  // rank sends the key's name to its owner; the error still names "w".
  std::vector<Tensor> gap = Good(rank, n);
  if (rank == 0) gap[0] = Part("w", 2 * n, 1, 1, 4, 0.f);
  ExpectGlobalError(*world, std::move(gap), root + "/gap");

  // A replica that disagrees on dtype.
  std::vector<Tensor> dtype = Good(rank, n);
  if (rank == last) dtype[1] = Part("r", 4, 0, 4, 4, 7.f, DType::kI32);
  ExpectGlobalError(*world, std::move(dtype), root + "/dtype");

  // A replica whose bytes differ: verify_replicas names the rank holding
  // different data (the writer's bytes are the reference) and the writer's
  // file: the last rank, or rank 0 where the last rank wrote "r". The key's
  // owner compares them; every rank gets rank 0's error.
  std::vector<Tensor> bytes = Good(rank, n);
  if (rank == last) bytes[1].mem[5] = -1.f;
  State state;
  Status s = SaveAll(*world, bytes, root + "/bytes", &state);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  const int writer = WriterOf(*world, state, "r");
  const int holder = writer == last ? 0 : last;
  EXPECT_THAT(s.message(),
              HasSubstr("rank 0: tensor 'r' box [0:4, 0:4]: rank " + std::to_string(holder) +
                        " holds different data than the rank that wrote it to "
                        "'data/" +
                        std::to_string(writer) + ".safetensors'"));
  EXPECT_THAT(s.message(), HasSubstr("must hold identical replicas"));
  EXPECT_FALSE(std::filesystem::exists(root + "/bytes/manifest"));

  // The good state saves, and every rank reads its own rows back.
  std::vector<Tensor> good = Good(rank, n);
  State saved;
  ASSERT_TRUE(SaveAll(*world, good, root + "/good", &saved).ok());
  std::vector<Tensor> back = Good(rank, n);
  State loaded;
  for (Tensor& x : back) {
    std::fill(x.mem.begin(), x.mem.end(), 0.f);
    loaded.tensors.push_back(x.t);
  }
  Status l = Load(loaded, root + "/good", *world, LoadOptions{}).status();
  ASSERT_TRUE(l.ok()) << l.ToString();
  std::vector<Tensor> want = Good(rank, n);
  for (size_t i = 0; i < back.size(); ++i) EXPECT_EQ(back[i].mem, want[i].mem);
}

}  // namespace
}  // namespace shardpoint

int main(int argc, char** argv) {
  return shardpoint::testing::RunMpiTests(argc, argv, "dist_plan_check");
}
