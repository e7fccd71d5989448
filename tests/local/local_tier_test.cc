// The local tier end to end with thread ranks grouped into nodes: each node
// has a root directory of its own and each rank reaches only its node's,
// through LocalTierOptions (local_root, node_id), so no test passes by
// reading another node's memory. Save under one layout, lose nodes, corrupt
// copies, load under another, bit for bit, and count where the bytes came
// from. (SIGKILL during saves: local_kill_trials.cc, ctest
// local_kill_trials_ci.)
#include "shardpoint/local_tier.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "src/checkpoint/manifest_io.h"
#include "src/comm/thread_comm.h"
#include "src/local/units.h"
#include "src/source/manifest_read.h"
#include "tests/local/local_fixture.h"
#include "tests/testing/counting_storage.h"
#include "tests/testing/forwarding_comm.h"
#include "tests/testing/transformer.h"

namespace shardpoint {
namespace {

using testing::ModelConfig;
using testing::ParallelConfig;

using local_testing::kModel;

// Holds the reads of data files that a rank makes off its own thread (its
// own node's copy read alongside the peer rounds) until that rank has
// finished a round of the exchange; after `patience` it lets them go and
// notes that the rounds waited for those reads instead.
class RoundGate {
 public:
  explicit RoundGate(int ranks) : threads_(ranks), rounds_(ranks, 0) {}
  void Enter(int rank) {
    std::lock_guard<std::mutex> l(mu_);
    threads_[rank] = std::this_thread::get_id();
  }
  void RoundDone(int rank) {
    std::lock_guard<std::mutex> l(mu_);
    ++rounds_[rank];
    cv_.notify_all();
  }
  // Called by every read of a data file on `rank`'s storage.
  void Read(int rank) {
    std::unique_lock<std::mutex> l(mu_);
    if (std::this_thread::get_id() == threads_[rank]) return;
    ++held_;
    const auto patience = std::chrono::seconds(60);  // a deadlock guard, not a timing
    if (!cv_.wait_for(l, patience, [&] { return rounds_[rank] > 0 || released_; })) {
      released_ = true;  // the rounds wait for these reads: let every read go
      cv_.notify_all();
    }
  }
  bool rounds_waited() const {
    std::lock_guard<std::mutex> l(mu_);
    return released_;
  }
  int held() const {
    std::lock_guard<std::mutex> l(mu_);
    return held_;
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::thread::id> threads_;
  std::vector<int> rounds_;
  bool released_ = false;
  int held_ = 0;
};

// Rank `rank`'s node storage with its data file reads passed through a gate.
class GatedStorage : public StorageWrapper {
 public:
  GatedStorage(Storage* base, RoundGate* gate, int rank)
      : StorageWrapper(base), gate_(gate), rank_(rank) {}
  Result<std::unique_ptr<ReadableFile>> NewReadableFile(const std::string& path) override {
    SP_ASSIGN_OR_RETURN(std::unique_ptr<ReadableFile> f, base()->NewReadableFile(path));
    if (path.find("/data/") == std::string::npos) return f;
    return std::unique_ptr<ReadableFile>(new Gated(std::move(f), this));
  }

 private:
  struct Gated : ReadableFileWrapper {
    Gated(std::unique_ptr<ReadableFile> f, GatedStorage* s)
        : ReadableFileWrapper(std::move(f)), s_(s) {}
    Status ReadAt(uint64_t offset, size_t n, void* dst) const override {
      s_->gate_->Read(s_->rank_);
      return ReadableFileWrapper::ReadAt(offset, n, dst);
    }
    GatedStorage* s_;
  };
  RoundGate* gate_;
  int rank_;
};

// A thread rank's Comm that counts the bytes a rank hands to the copying
// AllToAll and to the zero-copy AllToAllViews and AllToAllPieces (where
// counters are given),
// and tells a gate when the rank finished a round; it forwards both.
class CountingComm : public testing::ForwardingComm, public internal_comm::ViewAllToAll {
 public:
  CountingComm(Comm& in, std::atomic<uint64_t>* copied, std::atomic<uint64_t>* viewed,
               RoundGate* gate)
      : ForwardingComm(in), copied_(copied), viewed_(viewed), gate_(gate) {}
  Status AllToAll(const std::vector<std::string>& send, std::vector<std::string>* recv) override {
    for (const std::string& s : send) {
      if (copied_) *copied_ += s.size();
    }
    Status st = inner().AllToAll(send, recv);
    if (gate_) gate_->RoundDone(rank());
    return st;
  }
  Status AllToAllViews(
      const std::vector<std::string_view>& send,
      const std::function<Status(const std::vector<std::string_view>&)>& use) override {
    for (std::string_view s : send) {
      if (viewed_) *viewed_ += s.size();
    }
    Status st = dynamic_cast<internal_comm::ViewAllToAll&>(inner()).AllToAllViews(send, use);
    if (gate_) gate_->RoundDone(rank());
    return st;
  }
  Status AllToAllPieces(
      const std::vector<std::vector<std::string_view>>& send,
      const std::function<Status(const std::vector<std::vector<std::string_view>>&)>& use)
      override {
    for (const std::vector<std::string_view>& pieces : send) {
      for (std::string_view s : pieces) {
        if (viewed_) *viewed_ += s.size();
      }
    }
    Status st = dynamic_cast<internal_comm::ViewAllToAll&>(inner()).AllToAllPieces(send, use);
    if (gate_) gate_->RoundDone(rank());
    return st;
  }

 private:
  std::atomic<uint64_t>* copied_;
  std::atomic<uint64_t>* viewed_;
  RoundGate* gate_;
};

class LocalTierTest : public local_testing::NodesTest {
 protected:
  // Set: LoadAndCheck's ranks run through a CountingComm into these.
  std::atomic<uint64_t>* copied_ = nullptr;
  std::atomic<uint64_t>* viewed_ = nullptr;
  // Set: each rank's node storage is its gated one, and its Comm tells the
  // gate about its rounds.
  RoundGate* gate_ = nullptr;
  std::vector<std::unique_ptr<GatedStorage>> gated_;

  std::string Persistent(int64_t it) const { return root_ + "/persistent_" + std::to_string(it); }

  // Rank r of a job whose nodes hold `per_node` ranks each.
  LocalTierOptions Options(int rank, int per_node) const {
    LocalTierOptions o;
    o.local_root = NodeRoot(rank / per_node);
    o.node_id = "node" + std::to_string(rank / per_node);
    o.round_bytes = 96 << 10;  // several rounds
    o.storage = storage_;
    if (gate_) o.storage = gated_[rank].get();
    return o;
  }

  Storage* storage_ = nullptr;  // the nodes' storage (null: the default)

  // Saves iteration `it` (seed `it`) to the local tier of 8 ranks on 4
  // nodes and, if asked, as the persistent checkpoint too.
  void SaveBoth(int64_t it, bool persistent, int replicas = 1) {
    std::vector<testing::RankState> src = States(ParallelConfig{2, 2, 2, true}, it, true);
    for (Status s : RunThreadRanks(8, [&](Comm& comm) -> Status {
           LocalTierOptions o = Options(comm.rank(), 2);
           o.replicas = replicas;
           SP_RETURN_IF_ERROR(LocalSave(src[comm.rank()].state, it, comm, o).status());
           if (!persistent) return OkStatus();
           return Save(src[comm.rank()].state, Persistent(it), comm).status();
         })) {
      ASSERT_TRUE(s.ok()) << s.ToString();
    }
  }

  // Loads iteration `it` into `p` with `per_node` ranks per node; checks it
  // bit for bit against the reference and returns each rank's result.
  std::vector<LoadResult> LoadAndCheck(int64_t it, const ParallelConfig& p, int per_node,
                                       const std::string& persistent) {
    std::vector<testing::RankState> dst = States(p, it, false);
    std::vector<LoadResult> results(p.world());
    LoadOptions lo;
    lo.allow_unexpected_keys = true;
    for (Status s : RunThreadRanks(p.world(), [&](Comm& thread) -> Status {
           CountingComm counting(thread, copied_, viewed_, gate_);
           Comm& comm = copied_ || gate_ ? counting : thread;
           if (gate_) gate_->Enter(comm.rank());
           SP_ASSIGN_OR_RETURN(results[comm.rank()],
                               LocalLoad(dst[comm.rank()].state, it, comm,
                                         Options(comm.rank(), per_node), persistent, lo));
           return OkStatus();
         })) {
      EXPECT_TRUE(s.ok()) << s.ToString();
      if (!s.ok()) return {};
    }
    const testing::RefModel ref = testing::MakeReference(kModel, it);
    for (int r = 0; r < p.world(); ++r) {
      Status c = testing::CheckAgainstReference(ref, dst[r].state.tensors);
      EXPECT_TRUE(c.ok()) << "rank " << r << ": " << c.ToString();
      for (const Object& o : dst[r].state.objects) {
        EXPECT_EQ(o.bytes, "rng-of-rank-" + std::to_string(r));
      }
      EXPECT_EQ(*dst[r].state.common, "{\"iteration\": 1000}");
    }
    return results;
  }

  // Bytes of every verification unit of data file `name` of the persistent
  // checkpoint of `it`.
  uint64_t FileUnitBytes(int64_t it, const std::string& name) {
    auto m = internal_source::ReadManifest(DefaultStorage(), Persistent(it));
    EXPECT_TRUE(m.ok());
    const internal_local::UnitTable ut = internal_local::UnitsOf(*m);
    uint64_t n = 0;
    for (const internal_local::Unit& u : ut.units) n += m->files[u.file] == name ? u.nbytes : 0;
    return n;
  }
};

uint64_t Sum(const std::vector<LoadResult>& rs, uint64_t LoadResult::*field) {
  uint64_t n = 0;
  for (const LoadResult& r : rs) n += r.*field;
  return n;
}

void FlipByte(const std::string& path, uint64_t offset) {
  FILE* f = std::fopen(path.c_str(), "r+b");
  ASSERT_NE(f, nullptr) << path;
  std::fseek(f, static_cast<long>(offset), SEEK_SET);
  int c = std::fgetc(f);
  std::fseek(f, static_cast<long>(offset), SEEK_SET);
  std::fputc(c ^ 0x20, f);
  std::fclose(f);
}

// The offset of the first chunk of data file `name` (a byte a load needs).
uint64_t FirstChunkOffset(const std::string& dir, const std::string& name) {
  auto m = internal_source::ReadManifest(DefaultStorage(), dir);
  EXPECT_TRUE(m.ok());
  const internal_local::UnitTable ut = internal_local::UnitsOf(*m);
  for (const internal_local::Unit& u : ut.units) {
    if (m->files[u.file] == name) return u.offset;
  }
  ADD_FAILURE() << "no unit in " << name;
  return 0;
}

TEST_F(LocalTierTest, ARecoveryReadsTheNodesCopyOnce) {
  SaveBoth(6, /*persistent=*/false);
  testing::CountingStorage counting(DefaultStorage());
  storage_ = &counting;
  // Every node intact, the same layout: each byte a rank needs from its
  // node's copy is read once (placed as it is checked, not checked and then
  // read again), and each byte its node serves to a peer once.
  std::vector<LoadResult> rs = LoadAndCheck(6, ParallelConfig{2, 2, 2, true}, 2, "");
  ASSERT_EQ(rs.size(), 8u);
  const uint64_t local = Sum(rs, &LoadResult::bytes_local);
  const uint64_t served = Sum(rs, &LoadResult::bytes_peer);  // at least the bytes served
  ASSERT_GT(local, served);
  // The rest: manifests, replica maps, headers and the small objects.
  const uint64_t once = local + served;
  EXPECT_LT(counting.bytes.load(), once + once / 10)
      << "bytes read " << counting.bytes.load() << ", local " << local << ", served " << served;
}

TEST_F(LocalTierTest, ThreadRanksTakeALostNodesUnitsFromTheSendersMessagesWithoutACopy) {
  SaveBoth(8, /*persistent=*/false);
  ASSERT_TRUE(DefaultStorage()->RemoveAll(NodeRoot(1)).ok());
  std::atomic<uint64_t> copied{0}, viewed{0};
  copied_ = &copied;
  viewed_ = &viewed;
  std::vector<LoadResult> rs = LoadAndCheck(8, ParallelConfig{2, 2, 2, true}, 2, "");
  ASSERT_EQ(rs.size(), 8u);
  const uint64_t peer = Sum(rs, &LoadResult::bytes_peer);
  EXPECT_GT(peer, 0u);
  // Every unit node 1's ranks received went through the zero-copy exchange
  // (read in place in the server's message), none through the Comm's copy:
  // that carries only the request check's key numbers (8 bytes a key).
  EXPECT_GE(viewed.load(), peer);
  EXPECT_LT(copied.load(), peer / 64) << "copied " << copied.load() << ", peer " << peer;
}

TEST_F(LocalTierTest, NegativeIterationIsInvalidArgumentOnEveryRankSyncAndAsync) {
  std::vector<testing::RankState> src = States(ParallelConfig{2, 2, 2, true}, 1, true);
  for (bool async : {false, true}) {
    for (Status s : RunThreadRanks(8, [&](Comm& comm) -> Status {
           AsyncSaver saver;
           const State& st = src[comm.rank()].state;
           if (async) return LocalSaveAsync(saver, st, -3, comm, Options(comm.rank(), 2)).status();
           return LocalSave(st, -3, comm, Options(comm.rank(), 2)).status();
         })) {
      EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << async << ": " << s.ToString();
      EXPECT_NE(s.message().find("negative iteration -3"), std::string::npos) << s.ToString();
    }
  }
  for (int n = 0; n < 4; ++n) {  // nothing written, nothing removed
    Result<bool> there = DefaultStorage()->Exists(NodeRoot(n));
    EXPECT_TRUE(there.ok() && !*there) << NodeRoot(n);
  }
}

TEST_F(LocalTierTest, LostNodeRecoversFromPeersUnderAnotherLayout) {
  SaveBoth(7, /*persistent=*/false);
  ASSERT_TRUE(DefaultStorage()->RemoveAll(NodeRoot(1)).ok());
  // 6 ranks on nodes 0, 1 (wiped) and 2; node 3 is gone with the job: its
  // files survive on node 0, node 1's on node 2.
  std::vector<LoadResult> rs = LoadAndCheck(7, ParallelConfig{3, 1, 2, false}, 2, "");
  ASSERT_EQ(rs.size(), 6u);
  EXPECT_EQ(Sum(rs, &LoadResult::bytes_persistent), 0u);
  EXPECT_GT(Sum(rs, &LoadResult::bytes_peer), 0u);
  EXPECT_GT(Sum(rs, &LoadResult::bytes_local), 0u);
  // Node 1 holds nothing: its ranks' bytes all came from peers.
  EXPECT_EQ(rs[2].bytes_local + rs[3].bytes_local, 0u);
}

// A sharded manifest (format v6) in node memory: the keys' owners on other
// nodes cannot write their shards where rank 0 reads the manifest, so every
// shard stays on rank 0's node and recovery works as for a small one.
TEST_F(LocalTierTest, AShardedManifestStaysOnRank0sNodeAndALostNodeRecovers) {
  internal_checkpoint::SetManifestSharding({0, 4096, 4096});
  SaveBoth(7, /*persistent=*/false);
  internal_checkpoint::SetManifestSharding({});
  for (int n = 1; n < 4; ++n) {
    Result<std::vector<std::string>> names =
        DefaultStorage()->ListDir(NodeRoot(n) + "/iter_0000007/data");
    ASSERT_TRUE(names.ok()) << names.status().ToString();
    for (const std::string& f : *names) EXPECT_FALSE(f.ends_with(".shards")) << n << ": " << f;
  }
  Result<std::vector<std::string>> own =
      DefaultStorage()->ListDir(NodeRoot(0) + "/iter_0000007/data");
  ASSERT_TRUE(own.ok());
  EXPECT_NE(std::find(own->begin(), own->end(), "manifest.shards"), own->end());
  ASSERT_TRUE(DefaultStorage()->RemoveAll(NodeRoot(1)).ok());
  std::vector<LoadResult> rs = LoadAndCheck(7, ParallelConfig{3, 1, 2, false}, 2, "");
  ASSERT_EQ(rs.size(), 6u);
  EXPECT_EQ(Sum(rs, &LoadResult::bytes_persistent), 0u);
}

TEST_F(LocalTierTest, BothCopiesLostReadsExactlyThoseBytesFromPersistent) {
  SaveBoth(3, /*persistent=*/true);
  // Node 1's files live on nodes 1 and 2: both wiped. Everything else
  // survives on nodes 0 and 3.
  ASSERT_TRUE(DefaultStorage()->RemoveAll(NodeRoot(1)).ok());
  ASSERT_TRUE(DefaultStorage()->RemoveAll(NodeRoot(2)).ok());
  std::vector<LoadResult> rs = LoadAndCheck(3, ParallelConfig{4, 1, 2, false}, 2, Persistent(3));
  ASSERT_EQ(rs.size(), 8u);
  EXPECT_EQ(Sum(rs, &LoadResult::bytes_persistent),
            FileUnitBytes(3, "data/2.safetensors") + FileUnitBytes(3, "data/3.safetensors"));
  EXPECT_GT(Sum(rs, &LoadResult::bytes_peer), 0u);
}

TEST_F(LocalTierTest, BothCopiesLostWithoutPersistentIsDataLossNamingTheFile) {
  SaveBoth(3, /*persistent=*/false);
  ASSERT_TRUE(DefaultStorage()->RemoveAll(NodeRoot(1)).ok());
  ASSERT_TRUE(DefaultStorage()->RemoveAll(NodeRoot(2)).ok());
  std::vector<testing::RankState> dst = States(ParallelConfig{2, 2, 2, true}, 3, false);
  for (Status s : RunThreadRanks(8, [&](Comm& comm) {
         return LocalLoad(dst[comm.rank()].state, 3, comm, Options(comm.rank(), 2)).status();
       })) {
    EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.ToString();
    EXPECT_NE(s.message().find("'data/2.safetensors' bytes ["), std::string::npos) << s.ToString();
  }
}

TEST_F(LocalTierTest, CorruptedOwnCopyIsServedByThePeerCopy) {
  SaveBoth(4, /*persistent=*/false);
  const std::string dir = NodeRoot(1) + "/iter_0000004";
  FlipByte(dir + "/data/2.safetensors", FirstChunkOffset(dir, "data/2.safetensors") + 5);
  std::vector<LoadResult> rs = LoadAndCheck(4, ParallelConfig{2, 2, 2, true}, 2, "");
  ASSERT_EQ(rs.size(), 8u);
  EXPECT_EQ(Sum(rs, &LoadResult::bytes_persistent), 0u);
  EXPECT_GT(rs[2].bytes_peer, 0u);  // rank 2 reads its own file, but that block from node 2
}

// The own node's copy is read alongside the peer rounds, not before them:
// every read of a data file off a rank's own thread is held until that rank
// finished a round of the exchange. Before, a rank read its node's copy on
// its own thread (and its pool's) and entered the rounds only after: no
// read was held (held() == 0 here), or a held one never saw a round and the
// gate let it go after its patience (rounds_waited).
TEST_F(LocalTierTest, TheOwnNodesCopyIsReadWhileThePeerRoundsRun) {
  SaveBoth(10, /*persistent=*/false);
  ASSERT_TRUE(DefaultStorage()->RemoveAll(NodeRoot(1)).ok());
  RoundGate gate(8);
  gate_ = &gate;
  for (int r = 0; r < 8; ++r) {
    gated_.push_back(std::make_unique<GatedStorage>(DefaultStorage(), &gate, r));
  }
  std::vector<LoadResult> rs = LoadAndCheck(10, ParallelConfig{2, 2, 2, true}, 2, "");
  ASSERT_EQ(rs.size(), 8u);
  EXPECT_GT(gate.held(), 0);
  EXPECT_FALSE(gate.rounds_waited());
  EXPECT_GT(rs[0].bytes_local, 0u);
  EXPECT_GT(rs[2].bytes_peer, 0u);
  EXPECT_EQ(Sum(rs, &LoadResult::bytes_persistent), 0u);
}

// A byte flipped in the own node's copy while a lost node is being served:
// node 2's copy of rank 4's file (its replica, on node 3, is intact) is
// found bad by the own reads only after pass 0's rounds began, and the unit
// comes from the other copy in the next pass; bit for bit, and each rank's
// bytes by source exact: against the same recovery of an intact copy, only
// that unit moves from local to peer, on the ranks of node 2 that need it.
TEST_F(LocalTierTest, AFlippedByteInTheOwnCopyFoundAlongsideThePeerRoundsComesFromThePeer) {
  SaveBoth(12, /*persistent=*/false);
  ASSERT_TRUE(DefaultStorage()->RemoveAll(NodeRoot(1)).ok());
  const std::vector<LoadResult> intact = LoadAndCheck(12, ParallelConfig{2, 2, 2, true}, 2, "");
  ASSERT_EQ(intact.size(), 8u);
  const std::string dir = NodeRoot(2) + "/iter_0000012";
  const uint64_t at = FirstChunkOffset(dir, "data/4.safetensors");
  auto m = internal_source::ReadManifest(DefaultStorage(), dir);
  ASSERT_TRUE(m.ok());
  uint64_t unit = 0;
  for (const internal_local::Unit& u : internal_local::UnitsOf(*m).units) {
    if (m->files[u.file] == "data/4.safetensors" && u.offset == at) unit = u.nbytes;
  }
  ASSERT_GT(unit, 0u);
  FlipByte(dir + "/data/4.safetensors", at + 5);
  const std::vector<LoadResult> rs = LoadAndCheck(12, ParallelConfig{2, 2, 2, true}, 2, "");
  ASSERT_EQ(rs.size(), 8u);
  uint64_t moved = 0;
  for (int r = 0; r < 8; ++r) {
    const uint64_t less = intact[r].bytes_local - rs[r].bytes_local;
    EXPECT_TRUE(less == 0 || less == unit) << "rank " << r << ": " << less;
    EXPECT_EQ(rs[r].bytes_peer, intact[r].bytes_peer + less) << "rank " << r;
    EXPECT_EQ(rs[r].bytes_received, intact[r].bytes_received + less) << "rank " << r;
    EXPECT_EQ(rs[r].bytes_persistent, 0u) << "rank " << r;
    if (r != 4 && r != 5) {
      EXPECT_EQ(less, 0u) << "rank " << r;  // not on node 2
    }
    moved += less;
  }
  EXPECT_EQ(intact[4].bytes_local - rs[4].bytes_local, unit);  // rank 4 reads its own file
  EXPECT_GE(moved, unit);
}

// A node's own copy cut short (node 2's copy of rank 4's file ends 5 bytes
// into its first unit) is a bad copy of every unit past its end: those come
// from the other copy, and the objects past the end too (the overlay the
// pipeline reads them through reaches past the short file).
TEST_F(LocalTierTest, AnOwnCopyCutShortIsABadCopyOfTheUnitsPastItsEnd) {
  SaveBoth(13, /*persistent=*/false);
  ASSERT_TRUE(DefaultStorage()->RemoveAll(NodeRoot(1)).ok());
  const std::vector<LoadResult> intact = LoadAndCheck(13, ParallelConfig{2, 2, 2, true}, 2, "");
  ASSERT_EQ(intact.size(), 8u);
  const std::string file = NodeRoot(2) + "/iter_0000013/data/4.safetensors";
  const uint64_t at = FirstChunkOffset(NodeRoot(2) + "/iter_0000013", "data/4.safetensors");
  std::filesystem::resize_file(file, at + 5);
  const std::vector<LoadResult> rs = LoadAndCheck(13, ParallelConfig{2, 2, 2, true}, 2, "");
  ASSERT_EQ(rs.size(), 8u);
  EXPECT_LT(rs[4].bytes_local, intact[4].bytes_local);
  EXPECT_GT(rs[4].bytes_peer, intact[4].bytes_peer);
  EXPECT_EQ(Sum(rs, &LoadResult::bytes_persistent), 0u);
  EXPECT_EQ(Sum(rs, &LoadResult::bytes_local) + Sum(rs, &LoadResult::bytes_peer),
            Sum(intact, &LoadResult::bytes_local) + Sum(intact, &LoadResult::bytes_peer));
}

// A server sends units from its mapping of its node's copy (file_map.h):
// node 2's replica of lost node 1's rank 2 file, cut short one unit in, is
// a bad copy of exactly the units past the cut (checked against the file's
// size before reading: past a mapping's end is SIGBUS), which come from the
// persistent checkpoint; bit for bit.
TEST_F(LocalTierTest, AReplicaCutShortSendsNothingPastItsEndAndThoseUnitsComeFromPersistent) {
  SaveBoth(6, /*persistent=*/true);
  ASSERT_TRUE(DefaultStorage()->RemoveAll(NodeRoot(1)).ok());
  const std::string dir = NodeRoot(2) + "/iter_0000006";
  const uint64_t at = FirstChunkOffset(dir, "data/2.safetensors");
  auto m = internal_source::ReadManifest(DefaultStorage(), Persistent(6));
  ASSERT_TRUE(m.ok());
  const internal_local::UnitTable ut = internal_local::UnitsOf(*m);
  uint64_t cut = 0, past = 0;
  for (const internal_local::Unit& u : ut.units) {
    if (m->files[u.file] == "data/2.safetensors" && u.offset == at) cut = at + u.nbytes + 5;
  }
  ASSERT_GT(cut, 0u);
  for (const internal_local::Unit& u : ut.units) {
    if (m->files[u.file] == "data/2.safetensors" && u.offset + u.nbytes > cut) past += u.nbytes;
  }
  ASSERT_GT(past, 0u);
  std::filesystem::resize_file(dir + "/data/2.safetensors", cut);
  std::vector<LoadResult> rs = LoadAndCheck(6, ParallelConfig{2, 2, 2, true}, 2, Persistent(6));
  ASSERT_EQ(rs.size(), 8u);
  EXPECT_EQ(Sum(rs, &LoadResult::bytes_persistent), past);
}

TEST_F(LocalTierTest, CorruptedReplicaOfALostNodeFallsBackToPersistentForThatBlockOnly) {
  SaveBoth(5, /*persistent=*/true);
  ASSERT_TRUE(DefaultStorage()->RemoveAll(NodeRoot(1)).ok());
  const std::string dir = NodeRoot(2) + "/iter_0000005";
  const uint64_t at = FirstChunkOffset(dir, "data/2.safetensors");
  FlipByte(dir + "/data/2.safetensors", at + 5);
  auto m = internal_source::ReadManifest(DefaultStorage(), Persistent(5));
  ASSERT_TRUE(m.ok());
  uint64_t unit = 0;
  for (const internal_local::Unit& u : internal_local::UnitsOf(*m).units) {
    if (m->files[u.file] == "data/2.safetensors" && u.offset == at) unit = u.nbytes;
  }
  ASSERT_GT(unit, 0u);
  std::vector<LoadResult> rs = LoadAndCheck(5, ParallelConfig{2, 2, 2, true}, 2, Persistent(5));
  ASSERT_EQ(rs.size(), 8u);
  EXPECT_EQ(Sum(rs, &LoadResult::bytes_persistent), unit);
}

TEST_F(LocalTierTest, TwoReplicasSurviveTwoLostNodes) {
  SaveBoth(6, /*persistent=*/false, /*replicas=*/2);
  ASSERT_TRUE(DefaultStorage()->RemoveAll(NodeRoot(1)).ok());
  ASSERT_TRUE(DefaultStorage()->RemoveAll(NodeRoot(2)).ok());
  std::vector<LoadResult> rs = LoadAndCheck(6, ParallelConfig{1, 2, 4, true}, 2, "");
  ASSERT_EQ(rs.size(), 8u);
  EXPECT_EQ(Sum(rs, &LoadResult::bytes_persistent), 0u);
}

TEST_F(LocalTierTest, AsyncSaveRecoversAndLatestSkipsAnUncommittedIteration) {
  SaveBoth(1, /*persistent=*/false);
  std::vector<testing::RankState> src = States(ParallelConfig{2, 2, 2, true}, 2, true);
  for (Status s : RunThreadRanks(8, [&](Comm& comm) -> Status {
         AsyncSaver saver;
         SP_ASSIGN_OR_RETURN(SaveHandle h, LocalSaveAsync(saver, src[comm.rank()].state, 2, comm,
                                                          Options(comm.rank(), 2)));
         return h.Wait().status();
       })) {
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  auto latest = [&](int world) {
    std::optional<int64_t> out;
    for (Status s : RunThreadRanks(world, [&](Comm& comm) -> Status {
           SP_ASSIGN_OR_RETURN(std::optional<int64_t> l,
                               LatestLocal(comm, Options(comm.rank(), 2)));
           if (comm.rank() == 0) out = l;
           return OkStatus();
         })) {
      EXPECT_TRUE(s.ok()) << s.ToString();
    }
    return out;
  };
  EXPECT_EQ(latest(8), std::optional<int64_t>(2));
  LoadAndCheck(2, ParallelConfig{2, 1, 4, true}, 2, "");
  // Iteration 2 loses both copies of node 1's files (no replica map on
  // nodes 1 and 2 any more): the newest complete one is 1.
  ASSERT_TRUE(DefaultStorage()->RemoveFile(NodeRoot(1) + "/iter_0000002/replicas").ok());
  ASSERT_TRUE(DefaultStorage()->RemoveFile(NodeRoot(2) + "/iter_0000002/replicas").ok());
  EXPECT_EQ(latest(8), std::optional<int64_t>(1));
}

// Reads of one file through it come back with one byte flipped: memory
// corrupted between the local save and the replication.
class FlippingStorage : public StorageWrapper {
 public:
  FlippingStorage(Storage* base, std::string suffix) : StorageWrapper(base), suffix_(suffix) {}
  Result<std::unique_ptr<ReadableFile>> NewReadableFile(const std::string& path) override {
    SP_ASSIGN_OR_RETURN(std::unique_ptr<ReadableFile> f, base()->NewReadableFile(path));
    if (!path.ends_with(suffix_)) return f;
    return std::unique_ptr<ReadableFile>(new Flipped(std::move(f)));
  }

 private:
  struct Flipped : ReadableFileWrapper {
    using ReadableFileWrapper::ReadableFileWrapper;
    Status ReadAt(uint64_t offset, size_t n, void* dst) const override {
      SP_RETURN_IF_ERROR(ReadableFileWrapper::ReadAt(offset, n, dst));
      if (n > 5000) static_cast<char*>(dst)[5000] ^= 1;  // inside the first chunk
      return OkStatus();
    }
  };
  std::string suffix_;
};

TEST_F(LocalTierTest, ACorruptedReplicaIsRefusedOnArrivalAndTheSaveFails) {
  std::vector<testing::RankState> src = States(ParallelConfig{2, 2, 2, true}, 9, true);
  FlippingStorage flipping(DefaultStorage(), "/data/2.safetensors");
  for (Status s : RunThreadRanks(8, [&](Comm& comm) {
         LocalTierOptions o = Options(comm.rank(), 2);
         if (comm.rank() == 2) o.storage = &flipping;
         return LocalSave(src[comm.rank()].state, 9, comm, o).status();
       })) {
    EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.ToString();
    EXPECT_NE(s.message().find("replica of 'data/2.safetensors' bytes ["), std::string::npos)
        << s.ToString();
    EXPECT_NE(s.message().find("from rank 2: checksum mismatch"), std::string::npos);
  }
  for (int node = 0; node < 4; ++node) {
    EXPECT_FALSE(*DefaultStorage()->Exists(NodeRoot(node) + "/iter_0000009/replicas"));
  }
}

// Writes to one path fail after its first slice: the job dying in the
// middle of a replica's transfer (nothing of the save runs after the
// failure, as after a SIGKILL there).
class DyingWriteStorage : public StorageWrapper {
 public:
  DyingWriteStorage(Storage* base, std::string path) : StorageWrapper(base), path_(path) {}
  Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path,
                                                        const WriteFileOptions& o) override {
    SP_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> f, base()->NewWritableFile(path, o));
    if (path != path_) return f;
    return std::unique_ptr<WritableFile>(new Dying(std::move(f)));
  }

 private:
  struct Dying : WritableFileWrapper {
    using WritableFileWrapper::WritableFileWrapper;
    Status WriteAt(uint64_t offset, const void* data, size_t n) override {
      if (offset > 0) return IOError("the job died here");
      return WritableFileWrapper::WriteAt(offset, data, n);
    }
  };
  std::string path_;
};

// A node's replica map is its commit: it must never exist while the
// node's replicas are incomplete. Iteration 12 dies after node 1 received
// the first slice of rank 0's file; then node 0 (the only other copy) is
// lost. The newest complete checkpoint is 11, and 12 is not found (a map
// written before the transfers would make 12 look complete, with a
// truncated replica as its only copy of data/0).
TEST_F(LocalTierTest, ADeathDuringTheTransfersLeavesNoReplicaMap) {
  SaveBoth(11, /*persistent=*/false);
  std::vector<testing::RankState> src = States(ParallelConfig{2, 2, 2, true}, 12, true);
  DyingWriteStorage dying(DefaultStorage(), NodeRoot(1) + "/iter_0000012/data/0.safetensors");
  for (Status s : RunThreadRanks(8, [&](Comm& comm) {
         LocalTierOptions o = Options(comm.rank(), 2);
         o.storage = &dying;
         return LocalSave(src[comm.rank()].state, 12, comm, o).status();
       })) {
    EXPECT_FALSE(s.ok());
  }
  ASSERT_TRUE(DefaultStorage()->RemoveAll(NodeRoot(0)).ok());
  std::optional<int64_t> latest;
  for (Status s : RunThreadRanks(8, [&](Comm& comm) -> Status {
         SP_ASSIGN_OR_RETURN(std::optional<int64_t> l, LatestLocal(comm, Options(comm.rank(), 2)));
         if (comm.rank() == 0) latest = l;
         return OkStatus();
       })) {
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  EXPECT_EQ(latest, std::optional<int64_t>(11));
  std::vector<testing::RankState> dst = States(ParallelConfig{2, 2, 2, true}, 12, false);
  for (Status s : RunThreadRanks(8, [&](Comm& comm) {
         return LocalLoad(dst[comm.rank()].state, 12, comm, Options(comm.rank(), 2)).status();
       })) {
    EXPECT_EQ(s.code(), StatusCode::kNotFound) << s.ToString();
  }
  LoadAndCheck(11, ParallelConfig{4, 1, 2, false}, 2, "");
}

}  // namespace
}  // namespace shardpoint
