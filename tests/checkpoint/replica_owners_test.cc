// SaveOptions::verify_replicas is checked by the keys' owners
// (src/checkpoint/replica_owners.h): rank 0's commit inbox holds no replica,
// and a replica that differs is still named with its holder and the
// writer's file, on every rank, with a cached plan too, and nothing is
// committed.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "shardpoint/checkpoint.h"
#include "shardpoint/plan_cache.h"
#include "src/io/mem_storage.h"
#include "tests/testing/gather_counting_comm.h"

namespace shardpoint {
namespace {

using ::testing::HasSubstr;
using ::testing::MatchesRegex;

constexpr int kRanks = 8, kKeys = 32;

// Rank r's state: the whole [16, 16] "k<i>" for every key it holds, filled
// from the key (so replicas are identical) unless `differ(r, i)`.
struct Held {
  std::vector<std::vector<float>> mem;
  State state;
};

Held Make(int r, const std::function<bool(int, int)>& holds,
          const std::function<bool(int, int)>& differ) {
  Held h;
  h.mem.reserve(kKeys);
  for (int i = 0; i < kKeys; ++i) {
    if (!holds(r, i)) continue;
    h.mem.emplace_back(256, static_cast<float>(i));
    if (differ(r, i)) h.mem.back()[7] = -1.0f;
    LocalTensor t;
    t.dtype = DType::kF32;
    t.data = h.mem.back().data();
    t.shape = {16, 16};
    const std::string key = "k" + std::to_string(i);
    t.segments = {Segment{key, {16, 16}, Box::Whole({16, 16}), {0, 0}}};
    h.state.tensors.push_back(t);
  }
  return h;
}

// Saves every rank's state; returns every rank's status and, in *gathered,
// the bytes rank 0 received by Gather.
std::vector<Status> SaveAll(std::vector<Held>& held, Storage* storage, const std::string& dir,
                            uint64_t* gathered, std::vector<SavePlanCache>* caches = nullptr) {
  return RunThreadRanks(kRanks, [&](Comm& comm) {
    testing::GatherCountingComm counting(comm);
    SaveOptions o;  // verify_replicas is on by default
    o.storage = storage;
    if (caches) o.plan_cache = &(*caches)[comm.rank()];
    Status s = Save(held[comm.rank()].state, dir, counting, o).status();
    if (comm.rank() == 0) *gathered = counting.gathered;
    return s;
  });
}

void ExpectAllOk(const std::vector<Status>& all) {
  for (const Status& s : all) EXPECT_TRUE(s.ok()) << s.ToString();
}

TEST(ReplicaOwners, Rank0CommitInboxHoldsNoReplicas) {
  auto mem = NewMemStorage();
  auto same = [](int, int) { return false; };
  // Each key on one rank, then every key on every rank: the same manifest
  // (32 chunks, each written once), and 7 x 32 replicas more in the second.
  std::vector<Held> alone, everywhere;
  for (int r = 0; r < kRanks; ++r) {
    alone.push_back(Make(
        r, [](int r, int i) { return i % kRanks == r; }, same));
    everywhere.push_back(Make(
        r, [](int, int) { return true; }, same));
  }
  uint64_t inbox_alone = 0, inbox_everywhere = 0;
  ExpectAllOk(SaveAll(alone, mem.get(), "/alone", &inbox_alone));
  ExpectAllOk(SaveAll(everywhere, mem.get(), "/everywhere", &inbox_everywhere));
  ASSERT_GT(inbox_alone, 0u);
  // Before the owners compared replicas, rank 0 received a reference and a
  // checksum for each of the 224 replicas (at least 21 bytes each) here. The
  // two inboxes differ only in the records' file lists (the writers the
  // owners chose: one rank a key, or spread over the ranks).
  EXPECT_LT(inbox_everywhere, inbox_alone + 224 * 21 / 4);
}

TEST(ReplicaOwners, DivergentReplicaIsNamedOnEveryRankAndNothingCommits) {
  auto mem = NewMemStorage();
  // Every key on every rank; ranks 3 and 6 hold different data for "k5"
  // and "k20", whose owners differ. Whoever writes each key, the first
  // mismatch in (holder, position) order names rank 3 (or rank 0, where
  // rank 3 wrote the key and every other rank differs from it).
  auto differ = [](int r, int i) { return (r == 3 || r == 6) && (i == 5 || i == 20); };
  std::vector<Held> held;
  for (int r = 0; r < kRanks; ++r)
    held.push_back(Make(
        r, [](int, int) { return true; }, differ));
  uint64_t inbox = 0;
  std::vector<Status> all = SaveAll(held, mem.get(), "/c", &inbox);
  for (const Status& s : all) {
    EXPECT_EQ(s.ToString(), all[0].ToString());
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  }
  EXPECT_THAT(all[0].message(),
              MatchesRegex("rank 0: tensor 'k(5|20)' box \\[0:16, 0:16\\]: rank [0-9] holds "
                           "different data than the rank that wrote it to "
                           "'data/[0-9]\\.safetensors' \\(checksum [0-9a-f]{16} vs "
                           "[0-9a-f]{16}\\); ranks that declare the same box must hold "
                           "identical replicas"));
  EXPECT_FALSE(*mem->Exists("/c/manifest"));
}

TEST(ReplicaOwners, CachedPlanStillComparesReplicas) {
  auto mem = NewMemStorage();
  std::vector<SavePlanCache> caches(kRanks);
  auto all_ranks = [](int, int) { return true; };
  std::vector<Held> good, bad;
  for (int r = 0; r < kRanks; ++r) {
    good.push_back(Make(r, all_ranks, [](int, int) { return false; }));
    bad.push_back(Make(r, all_ranks, [](int r, int i) { return r == 5 && i == 9; }));
  }
  uint64_t inbox = 0;
  ExpectAllOk(SaveAll(good, mem.get(), "/a", &inbox, &caches));
  // The same structure: every rank's plan comes from its cache.
  std::vector<Status> all = SaveAll(bad, mem.get(), "/b", &inbox, &caches);
  for (const Status& s : all) EXPECT_EQ(s.ToString(), all[0].ToString());
  EXPECT_EQ(all[0].code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(all[0].message(), HasSubstr("tensor 'k9' box [0:16, 0:16]: rank "));
  EXPECT_THAT(all[0].message(), HasSubstr("must hold identical replicas"));
  EXPECT_FALSE(*mem->Exists("/b/manifest"));
  EXPECT_EQ(caches[0].hits(), 1);
}

}  // namespace
}  // namespace shardpoint
