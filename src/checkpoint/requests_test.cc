#include "src/checkpoint/requests.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "tests/testing/forwarding_comm.h"

namespace shardpoint::internal_checkpoint {
namespace {

std::string KeyName(uint64_t i) { return "layer." + std::to_string(1000 + i); }

// A rank's Comm that counts the bytes it receives from the AllToAll and the
// AllGather (everything the request check exchanges).
class ReceivedBytes : public testing::ForwardingComm {
 public:
  ReceivedBytes(Comm& in, std::atomic<uint64_t>* received)
      : ForwardingComm(in), received_(received) {}
  Status AllGather(std::string_view mine, std::vector<std::string>* all) override {
    SP_RETURN_IF_ERROR(inner().AllGather(mine, all));
    for (const std::string& s : *all) *received_ += s.size();
    return OkStatus();
  }
  Status AllToAll(const std::vector<std::string>& send, std::vector<std::string>* recv) override {
    SP_RETURN_IF_ERROR(inner().AllToAll(send, recv));
    for (const std::string& s : *recv) *received_ += s.size();
    return OkStatus();
  }

 private:
  std::atomic<uint64_t>* received_;
};

TEST(GatherRequestsTest, EveryRankGetsTheKeysNoRankRequestedAndEveryMissingKeyOnce) {
  std::mt19937 rng(20261129);
  for (int n = 1; n <= 6; ++n) {
    for (uint64_t count : {0, 1, 7, 23, 100}) {
      // Each rank requests a random subset (with repeats) and misses a few
      // keys drawn from a small pool, so that ranks miss the same ones.
      std::vector<std::vector<uint64_t>> wanted(n);
      std::vector<std::vector<std::string>> missing(n);
      std::set<uint64_t> any;
      std::set<std::string> all_missing;
      for (int r = 0; r < n; ++r) {
        for (uint64_t i = 0; i < count; ++i) {
          if (rng() % 3 == 0) {
            wanted[r].push_back(i);
            if (rng() % 2 == 0) wanted[r].push_back(i);
            any.insert(i);
          }
        }
        std::shuffle(wanted[r].begin(), wanted[r].end(), rng);
        for (int k = rng() % 3; k > 0; --k) {
          missing[r].push_back("missing." + std::to_string(rng() % 4));
          all_missing.insert(missing[r].back());
        }
      }
      std::vector<std::string> unrequested;
      for (uint64_t i = 0; i < count; ++i) {
        if (!any.count(i)) unrequested.push_back(KeyName(i));
      }
      std::sort(unrequested.begin(), unrequested.end());
      std::vector<GatheredRequests> got(n);
      std::vector<Status> st = RunThreadRanks(n, [&](Comm& comm) {
        const int r = comm.rank();
        SP_ASSIGN_OR_RETURN(
            got[r], GatherRequests(comm, OkStatus(), count, wanted[r], missing[r], [&](uint64_t i) {
              // Only the owner names a key.
              EXPECT_EQ(i % n, static_cast<uint64_t>(r));
              return KeyName(i);
            }));
        return OkStatus();
      });
      for (int r = 0; r < n; ++r) {
        ASSERT_TRUE(st[r].ok()) << st[r].ToString();
        EXPECT_EQ(got[r].unrequested, unrequested) << "n " << n << " count " << count;
        EXPECT_EQ(got[r].missing, std::vector<std::string>(all_missing.begin(), all_missing.end()));
      }
    }
  }
}

TEST(GatherRequestsTest, TheLowestFailingRanksErrorIsEveryRanks) {
  std::vector<Status> st = RunThreadRanks(5, [&](Comm& comm) {
    const int r = comm.rank();
    Status local =
        r == 2 || r == 4
            ? InvalidArgumentError("tensor 'w" + std::to_string(r) + "': requested dtype f32")
            : OkStatus();
    return GatherRequests(comm, local, 10, {static_cast<uint64_t>(r)}, {"gone"},
                          [](uint64_t i) { return KeyName(i); })
        .status();
  });
  for (const Status& s : st) {
    EXPECT_EQ(s.ToString(), "InvalidArgument: rank 2: tensor 'w2': requested dtype f32");
  }
}

// A rank receives about its own share of the requests, not a byte for each
// stored key from every rank (the all-gather it replaces).
TEST(GatherRequestsTest, ARankReceivesItsShareNotEveryRanksRequests) {
  const int n = 8;
  const uint64_t count = 8000, per_rank = count / n;
  std::vector<std::atomic<uint64_t>> received(n);
  std::vector<Status> st = RunThreadRanks(n, [&](Comm& inner) {
    ReceivedBytes comm(inner, &received[inner.rank()]);
    // Rank r requests a contiguous run of keys, every key once in all.
    std::vector<uint64_t> wanted;
    for (uint64_t i = 0; i < per_rank; ++i) wanted.push_back(comm.rank() * per_rank + i);
    SP_ASSIGN_OR_RETURN(GatheredRequests g, GatherRequests(comm, OkStatus(), count, wanted, {},
                                                           [](uint64_t i) { return KeyName(i); }));
    EXPECT_TRUE(g.unrequested.empty());
    return OkStatus();
  });
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(st[r].ok()) << st[r].ToString();
    // Its keys' numbers (8 bytes each) and a few bytes of framing per rank;
    // the all-gather of a byte per stored key took n * count = 64,000.
    EXPECT_LT(received[r].load(), 8 * per_rank + 32 * n) << "rank " << r;
  }
}

}  // namespace
}  // namespace shardpoint::internal_checkpoint
