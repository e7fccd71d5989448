// A job's first checkpoint survives a power loss right after its save
// returned, though the directories above it did not exist before: every
// directory the save (or the manager) creates is durable when it returns.
// In memory, whose crash model keeps only synced directory entries.
#include <gtest/gtest.h>

#include <vector>

#include "shardpoint/checkpoint.h"
#include "shardpoint/manager.h"
#include "src/io/mem_storage.h"

namespace shardpoint {
namespace {

// One rank holding "w" [4, 4] F32 with distinct values per `seed`.
struct Filled {
  std::vector<float> mem = std::vector<float>(16);
  State state;
  explicit Filled(float seed) {
    for (size_t i = 0; i < mem.size(); ++i) mem[i] = seed + static_cast<float>(i) * 0.25f;
    LocalTensor t;
    t.data = mem.data();
    t.shape = {4, 4};
    t.segments = {Segment{"w", {4, 4}, Box::Whole({4, 4}), {0, 0}}};
    state.tensors.push_back(t);
  }
};

TEST(NewDirsCrashTest, FirstSaveIntoNewParentsSurvivesPowerLoss) {
  internal_io::MemStorage mem;
  std::unique_ptr<Comm> comm = MakeSingleComm();
  SaveOptions so;
  so.storage = &mem;
  ASSERT_TRUE(Save(Filled(3).state, "/n1/a/b/ck", *comm, so).ok());
  mem.SimulateCrash();
  Filled got(-100);
  LoadOptions lo;
  lo.storage = &mem;
  Result<LoadResult> r = Load(got.state, "/n1/a/b/ck", *comm, lo);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(got.mem, Filled(3).mem);
}

TEST(NewDirsCrashTest, ManagerFirstSaveUnderNewRootSurvivesPowerLoss) {
  internal_io::MemStorage mem;
  std::unique_ptr<Comm> comm = MakeSingleComm();
  ManagerOptions mo;
  mo.storage = &mem;
  {
    Result<std::unique_ptr<CheckpointManager>> m = CheckpointManager::Open("/jobs/run1", *comm, mo);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    ASSERT_TRUE((*m)->Save(Filled(7).state, 1, *comm).ok());
  }
  mem.SimulateCrash();
  Result<std::unique_ptr<CheckpointManager>> m = CheckpointManager::Open("/jobs/run1", *comm, mo);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  Filled got(-100);
  Result<int64_t> it = (*m)->Resume(got.state, *comm);
  ASSERT_TRUE(it.ok()) << it.status().ToString();
  EXPECT_EQ(*it, 1);
  EXPECT_EQ(got.mem, Filled(7).mem);
}

}  // namespace
}  // namespace shardpoint
