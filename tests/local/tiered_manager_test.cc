// TieredManager with thread ranks as nodes (8 ranks on 4 nodes of 2, each
// node with its own local root): the schedule, the drain into an ordinary
// committed persistent checkpoint, local retention, and resume from the
// newest checkpoint complete in either tier after kills and wiped nodes,
// under another layout, bit for bit.
#include "shardpoint/tiered_manager.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <string>

#include "src/checkpoint/commit.h"
#include "src/local/node_storage.h"
#include "src/local/recycle.h"
#include "src/local/units.h"
#include "src/source/manifest_read.h"
#include "tests/local/local_fixture.h"
#include "tests/testing/transformer.h"

namespace shardpoint {
namespace {

using testing::ModelConfig;
using testing::ParallelConfig;

using local_testing::kModel;
const ParallelConfig kSaveLayout{2, 2, 2, true};

class TieredManagerTest : public local_testing::NodesTest {
 protected:
  std::string Persistent() const { return root_ + "/persistent"; }
  void Wipe(int node) { ASSERT_TRUE(DefaultStorage()->RemoveAll(NodeRoot(node)).ok()); }

  TieredOptions Options(int rank, int per_node) const {
    TieredOptions o = base_;
    o.local.local_root = NodeRoot(rank / per_node);
    o.local.node_id = "node" + std::to_string(rank / per_node);
    o.local.round_bytes = 96 << 10;
    return o;
  }

  // One job of 8 ranks on 4 nodes: Save at each of `iterations` (the state
  // of iteration i is the reference of seed i), then Flush if asked; the
  // job ends (its managers destroyed) without one otherwise, as a killed
  // job would leave it. Returns each Save's steps of rank 0.
  std::vector<TieredStep> Run(const std::vector<int64_t>& iterations, bool flush,
                              bool async = false) {
    std::vector<std::vector<testing::RankState>> states;
    for (int64_t it : iterations) states.push_back(States(kSaveLayout, it, true));
    std::vector<TieredStep> steps;
    for (Status s : RunThreadRanks(8, [&](Comm& comm) -> Status {
           AsyncSaver saver;
           SP_ASSIGN_OR_RETURN(auto m,
                               TieredManager::Open(Persistent(), comm, Options(comm.rank(), 2)));
           for (size_t i = 0; i < iterations.size(); ++i) {
             SP_ASSIGN_OR_RETURN(TieredStep st, m->Save(states[i][comm.rank()].state, iterations[i],
                                                        comm, async ? &saver : nullptr));
             if (comm.rank() == 0) steps.push_back(st);
           }
           if (flush) SP_RETURN_IF_ERROR(m->Flush(comm).status());
           return OkStatus();
         })) {
      EXPECT_TRUE(s.ok()) << s.ToString();
    }
    return steps;
  }

  // Resumes on 6 ranks (TP3 DP2, 3 nodes of 2: node 3 gone with the job);
  // checks the state bit for bit against the reference of the iteration
  // resumed. Returns each rank's TieredResume.
  std::vector<TieredResume> Resume() {
    const ParallelConfig p{3, 1, 2, false};
    std::vector<testing::RankState> dst = States(p, 0, false);
    std::vector<TieredResume> out(p.world());
    LoadOptions lo;
    lo.allow_unexpected_keys = true;
    for (Status s : RunThreadRanks(p.world(), [&](Comm& comm) -> Status {
           SP_ASSIGN_OR_RETURN(auto m,
                               TieredManager::Open(Persistent(), comm, Options(comm.rank(), 2)));
           SP_ASSIGN_OR_RETURN(std::optional<TieredResume> got,
                               m->Resume(dst[comm.rank()].state, comm, lo));
           if (!got) return NotFoundError("nothing to resume");
           out[comm.rank()] = *got;
           return OkStatus();
         })) {
      EXPECT_TRUE(s.ok()) << s.ToString();
      if (!s.ok()) return {};
    }
    const testing::RefModel ref = testing::MakeReference(kModel, out[0].iteration);
    for (int r = 0; r < p.world(); ++r) {
      EXPECT_EQ(out[r].iteration, out[0].iteration);
      Status c = testing::CheckAgainstReference(ref, dst[r].state.tensors);
      EXPECT_TRUE(c.ok()) << "rank " << r << ": " << c.ToString();
    }
    return out;
  }

  uint64_t Sum(const std::vector<TieredResume>& rs, uint64_t LoadResult::*field) {
    uint64_t n = 0;
    for (const TieredResume& r : rs) n += r.load.*field;
    return n;
  }

  TieredOptions base_;
};

bool Exists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

TEST_F(TieredManagerTest, DrainedLocalCheckpointIsAnOrdinaryCommittedCheckpoint) {
  base_.local_every = 1;
  base_.persistent_every = 2;
  base_.keep_local = 2;
  std::vector<TieredStep> steps = Run({1, 2, 3}, /*flush=*/true);
  ASSERT_EQ(steps.size(), 3u);
  EXPECT_TRUE(steps[1].local && steps[1].persistent);
  EXPECT_FALSE(steps[0].persistent || steps[2].persistent);
  // The persistent tier: iteration 2 committed with its tracker; a plain
  // Load under another layout reads it bit for bit.
  EXPECT_TRUE(Exists(Persistent() + "/iter_0000002/manifest"));
  EXPECT_FALSE(Exists(Persistent() + "/iter_0000001"));
  EXPECT_FALSE(Exists(Persistent() + "/iter_0000003"));
  FILE* f = std::fopen((Persistent() + "/latest").c_str(), "r");
  ASSERT_NE(f, nullptr);
  char buf[16] = {};
  ASSERT_GT(std::fread(buf, 1, sizeof buf - 1, f), 0u);
  std::fclose(f);
  EXPECT_EQ(std::string(buf), "2\n");
  std::vector<testing::RankState> dst = States(ParallelConfig{4, 1, 1, false}, 0, false);
  const testing::RefModel ref = testing::MakeReference(kModel, 2);
  for (Status s : RunThreadRanks(4, [&](Comm& comm) -> Status {
         LoadOptions lo;
         lo.allow_unexpected_keys = true;
         SP_RETURN_IF_ERROR(
             Load(dst[comm.rank()].state, Persistent() + "/iter_0000002", comm, lo).status());
         return testing::CheckAgainstReference(ref, dst[comm.rank()].state.tensors);
       })) {
    EXPECT_TRUE(s.ok()) << s.ToString();
  }
  // Local retention: the newest 2 on every node.
  for (int n = 0; n < 4; ++n) {
    EXPECT_FALSE(Exists(NodeRoot(n) + "/iter_0000001")) << n;
    EXPECT_TRUE(Exists(NodeRoot(n) + "/iter_0000003/replicas")) << n;
    EXPECT_TRUE(Exists(NodeRoot(n) + "/iter_0000002/replicas")) << n;
  }
}

TEST_F(TieredManagerTest, ResumePicksTheNewestCompleteInEitherTierAfterKillsAndWipes) {
  base_.local_every = 1;
  base_.persistent_every = 2;
  Run({1, 2, 3, 4}, /*flush=*/true);
  Run({5}, /*flush=*/false);  // the job is killed after its local save of 5
  // Nodes intact: the local 5, not a byte from persistent storage.
  std::vector<TieredResume> rs = Resume();
  ASSERT_EQ(rs.size(), 6u);
  EXPECT_EQ(rs[0].iteration, 5);
  EXPECT_TRUE(rs[0].from_local);
  EXPECT_EQ(Sum(rs, &LoadResult::bytes_persistent), 0u);
  // One node wiped: still 5, from peers, 0 bytes from persistent.
  Wipe(1);
  rs = Resume();
  ASSERT_EQ(rs.size(), 6u);
  EXPECT_EQ(rs[0].iteration, 5);
  EXPECT_TRUE(rs[0].from_local);
  EXPECT_EQ(Sum(rs, &LoadResult::bytes_persistent), 0u);
  EXPECT_GT(Sum(rs, &LoadResult::bytes_peer), 0u);
  // Nodes 1 and 2 wiped: some files of every local checkpoint lost; the
  // persistent 4.
  Wipe(2);
  rs = Resume();
  ASSERT_EQ(rs.size(), 6u);
  EXPECT_EQ(rs[0].iteration, 4);
  EXPECT_FALSE(rs[0].from_local);
}

TEST_F(TieredManagerTest, NothingInEitherTierIsNoResumeAndLeavesTheStateAlone) {
  base_.local_every = 1;
  base_.persistent_every = 0;
  Run({1}, /*flush=*/true);
  for (int n = 0; n < 4; ++n) Wipe(n);  // the only checkpoint was local
  const ParallelConfig p{3, 1, 2, false};
  std::vector<testing::RankState> dst = States(p, 7, true);  // filled: must stay so
  for (Status s : RunThreadRanks(p.world(), [&](Comm& comm) -> Status {
         SP_ASSIGN_OR_RETURN(auto m,
                             TieredManager::Open(Persistent(), comm, Options(comm.rank(), 2)));
         SP_ASSIGN_OR_RETURN(std::optional<TieredResume> got,
                             m->Resume(dst[comm.rank()].state, comm));
         EXPECT_FALSE(got.has_value()) << "rank " << comm.rank();
         return OkStatus();
       })) {
    EXPECT_TRUE(s.ok()) << s.ToString();
  }
  const testing::RefModel ref = testing::MakeReference(kModel, 7);
  for (int r = 0; r < p.world(); ++r) {
    Status c = testing::CheckAgainstReference(ref, dst[r].state.tensors);
    EXPECT_TRUE(c.ok()) << "rank " << r << ": " << c.ToString();
  }
}

TEST_F(TieredManagerTest, ADrainNotCommittedWhenTheJobDiesIsNotResumedFromPersistent) {
  base_.local_every = 2;
  base_.persistent_every = 2;
  Run({2}, /*flush=*/true);
  Run({3, 4}, /*flush=*/false);  // killed: the drain of 4 copied, never committed
  EXPECT_FALSE(Exists(Persistent() + "/iter_0000004/manifest"));
  for (int n = 0; n < 4; ++n) Wipe(n);
  std::vector<TieredResume> rs = Resume();
  ASSERT_EQ(rs.size(), 6u);
  EXPECT_EQ(rs[0].iteration, 2);
  EXPECT_FALSE(rs[0].from_local);
}

TEST_F(TieredManagerTest, AsyncLocalSavesDrainAfterTheyCommit) {
  base_.local_every = 1;
  base_.persistent_every = 2;
  std::vector<TieredStep> steps = Run({1, 2, 3}, /*flush=*/true, /*async=*/true);
  ASSERT_EQ(steps.size(), 3u);
  EXPECT_TRUE(steps[1].handle.valid());
  EXPECT_TRUE(Exists(Persistent() + "/iter_0000002/manifest"));
  for (int n = 0; n < 4; ++n) Wipe(n);
  std::vector<TieredResume> rs = Resume();
  ASSERT_EQ(rs.size(), 6u);
  EXPECT_EQ(rs[0].iteration, 2);
}

TEST_F(TieredManagerTest, DrainBandwidthIsBounded) {
  base_.local_every = 0;
  base_.persistent_every = 1;
  const uint64_t rate = 256 << 10;  // bytes per second, per rank
  base_.drain_bytes_per_second = rate;
  std::vector<testing::RankState> src = States(kSaveLayout, 1, true);
  double flush_seconds = 0;  // rank 0: the drain, started by Save, finished by Flush
  for (Status s : RunThreadRanks(8, [&](Comm& comm) -> Status {
         SP_ASSIGN_OR_RETURN(auto m,
                             TieredManager::Open(Persistent(), comm, Options(comm.rank(), 2)));
         SP_ASSIGN_OR_RETURN(TieredStep st, m->Save(src[comm.rank()].state, 1, comm));
         if (!st.persistent || m->draining() != 1) return InternalError("no drain started");
         const auto start = std::chrono::steady_clock::now();
         SP_ASSIGN_OR_RETURN(std::optional<int64_t> done, m->Flush(comm));
         if (done != 1) return InternalError("Flush did not commit iteration 1");
         if (comm.rank() == 0) {
           flush_seconds =
               std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
         }
         return OkStatus();
       })) {
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  auto m = internal_source::ReadManifest(DefaultStorage(), Persistent() + "/iter_0000001");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  // The largest file takes at least its size / rate; the drain began at
  // most the rest of Save (local retention) before Flush.
  uint64_t largest = 0;
  for (const std::string& name : m->files) {
    largest = std::max<uint64_t>(
        largest, std::filesystem::file_size(Persistent() + "/iter_0000001/" + name));
  }
  ASSERT_GT(largest, 100u << 10);
  EXPECT_GE(flush_seconds, 0.5 * static_cast<double>(largest) / rate);
}

TEST_F(TieredManagerTest, ACorruptedLocalCopyIsNeverDrainedIntoACommittedCheckpoint) {
  base_.local_every = 2;
  base_.persistent_every = 2;
  std::vector<testing::RankState> src = States(kSaveLayout, 2, true);
  for (Status s : RunThreadRanks(8, [&](Comm& comm) -> Status {
         AsyncSaver saver;
         SP_ASSIGN_OR_RETURN(auto m,
                             TieredManager::Open(Persistent(), comm, Options(comm.rank(), 2)));
         SP_ASSIGN_OR_RETURN(TieredStep st, m->Save(src[comm.rank()].state, 2, comm, &saver));
         SP_RETURN_IF_ERROR(st.handle.Wait().status());
         SP_RETURN_IF_ERROR(comm.Barrier());
         if (comm.rank() == 0) {  // a flipped bit in node 0's own copy of data/0
           const std::string dir = NodeRoot(0) + "/iter_0000002";
           auto man = internal_source::ReadManifest(DefaultStorage(), dir);
           SP_RETURN_IF_ERROR(man.status());
           const internal_local::UnitTable ut = internal_local::UnitsOf(*man);
           FILE* f = std::fopen((dir + "/data/0.safetensors").c_str(), "r+b");
           if (f == nullptr) return InternalError("open");
           std::fseek(f, static_cast<long>(ut.units[ut.file_begin[0]].offset + 3), SEEK_SET);
           const int c = std::fgetc(f);
           std::fseek(f, -1, SEEK_CUR);
           std::fputc(c ^ 1, f);
           std::fclose(f);
         }
         SP_RETURN_IF_ERROR(comm.Barrier());
         return m->Flush(comm).status();
       })) {
    EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.ToString();
    EXPECT_NE(s.message().find("'data/0.safetensors' bytes ["), std::string::npos) << s.ToString();
  }
  EXPECT_FALSE(Exists(Persistent() + "/iter_0000002/manifest"));
  EXPECT_FALSE(Exists(Persistent() + "/iter_0000002/data/0.safetensors"));
}

// Per data file of a node's local checkpoint: (inode, size).
std::map<std::string, std::pair<ino_t, off_t>> DataFiles(const std::string& dir) {
  std::map<std::string, std::pair<ino_t, off_t>> out;
  for (const auto& e : std::filesystem::directory_iterator(dir + "/data")) {
    struct stat st;
    EXPECT_EQ(::stat(e.path().c_str(), &st), 0);
    out[e.path().filename()] = {st.st_ino, st.st_size};
  }
  return out;
}

TEST_F(TieredManagerTest, ALocalSaveWritesOverThePagesOfTheCheckpointRetentionRemoves) {
  base_.local_every = 1;
  base_.persistent_every = 0;
  base_.keep_local = 2;
  Run({1, 2}, /*flush=*/true);
  // Iteration 1's files, made longer than any new one: the tail must go.
  std::vector<std::map<std::string, std::pair<ino_t, off_t>>> old(4);
  for (int n = 0; n < 4; ++n) {
    old[n] = DataFiles(NodeRoot(n) + "/iter_0000001");
    ASSERT_EQ(old[n].size(), 4u) << n;  // its 2 ranks' files and 2 replicas
    for (const auto& [name, f] : old[n]) {
      std::filesystem::resize_file(NodeRoot(n) + "/iter_0000001/data/" + name, f.second + 12345);
    }
  }
  Run({3}, /*flush=*/true);
  for (int n = 0; n < 4; ++n) {
    EXPECT_FALSE(Exists(NodeRoot(n) + "/iter_0000001")) << n;
    EXPECT_FALSE(Exists(NodeRoot(n) + "/iter_0000003/spare")) << n;
    auto now = DataFiles(NodeRoot(n) + "/iter_0000003");
    auto kept = DataFiles(NodeRoot(n) + "/iter_0000002");
    ASSERT_EQ(now.size(), 4u) << n;
    for (const auto& [name, f] : now) {
      EXPECT_EQ(f.first, old[n][name].first) << "node " << n << " " << name << ": a new inode";
      EXPECT_EQ(f.second, kept[name].second) << "node " << n << " " << name;
    }
  }
  std::vector<TieredResume> rs = Resume();  // bit for bit (checked there)
  ASSERT_EQ(rs.size(), 6u);
  EXPECT_EQ(rs[0].iteration, 3);
  EXPECT_TRUE(rs[0].from_local);
}

// A job killed while it wrote over the spares (moved there, the first file
// half overwritten with other bytes): the newest complete one resumes, and
// the next save cleans up.
TEST_F(TieredManagerTest, AJobKilledWhileWritingOverSparesResumesTheNewestComplete) {
  base_.local_every = 1;
  base_.persistent_every = 0;
  base_.keep_local = 2;
  Run({1, 2}, /*flush=*/true);
  for (int n = 0; n < 4; ++n) {
    internal_local::RootedStorage node(DefaultStorage(), NodeRoot(n));
    ASSERT_TRUE(node.CreateDirs("/iter_0000003/data").ok());
    ASSERT_TRUE(internal_local::MoveToSpare(&node, 1, "/iter_0000003").ok());
    Result<std::vector<std::string>> spares = node.ListDir("/iter_0000003/spare");
    ASSERT_TRUE(spares.ok() && !spares->empty()) << n;
    const std::string name = "/iter_0000003/data/" + spares->front();
    ASSERT_TRUE(node.Rename("/iter_0000003/spare/" + spares->front(), name).ok());
    FILE* f = std::fopen(node.Map(name).c_str(), "r+");
    ASSERT_NE(f, nullptr);
    std::fputs("overwritten by the killed save", f);
    std::fclose(f);
  }
  std::vector<TieredResume> rs = Resume();
  ASSERT_EQ(rs.size(), 6u);
  EXPECT_EQ(rs[0].iteration, 2);
  EXPECT_TRUE(rs[0].from_local);
  EXPECT_EQ(Sum(rs, &LoadResult::bytes_persistent), 0u);
  Run({3}, /*flush=*/true);
  rs = Resume();
  ASSERT_EQ(rs.size(), 6u);
  EXPECT_EQ(rs[0].iteration, 3);
  for (int n = 0; n < 4; ++n) {
    EXPECT_FALSE(Exists(NodeRoot(n) + "/iter_0000001")) << n;
    EXPECT_FALSE(Exists(NodeRoot(n) + "/iter_0000003/spare")) << n;
  }
}

TEST_F(TieredManagerTest, BadScheduleIsInvalidArgument) {
  base_.keep_local = 0;
  for (Status s : RunThreadRanks(2, [&](Comm& comm) {
         return TieredManager::Open(Persistent(), comm, Options(comm.rank(), 1)).status();
       })) {
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  }
}

}  // namespace
}  // namespace shardpoint
