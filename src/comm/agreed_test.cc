#include "src/comm/agreed.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace shardpoint::internal_comm {
namespace {

std::string Payload(int r) { return std::string(static_cast<size_t>(r) * 3, 'a' + r); }

TEST(AllGatherAgreed, PayloadsWhenAllOkElseTheLowestFailingRank) {
  for (int n = 1; n <= 5; ++n) {
    for (unsigned mask = 0; mask < (1u << n); ++mask) {
      std::vector<std::vector<std::string>> got(n);
      std::vector<Status> statuses = RunThreadRanks(n, [&](Comm& comm) {
        const int r = comm.rank();
        Status local = (mask >> r & 1) ? DataLossError("bad " + std::to_string(r)) : OkStatus();
        return AllGatherAgreed(comm, local, Payload(r), &got[r]);
      });
      for (int r = 0; r < n; ++r) {
        if (mask == 0) {
          ASSERT_TRUE(statuses[r].ok()) << statuses[r].ToString();
          ASSERT_EQ(got[r].size(), static_cast<size_t>(n));
          for (int q = 0; q < n; ++q) EXPECT_EQ(got[r][q], Payload(q));
        } else {
          const int lowest = __builtin_ctz(mask);
          EXPECT_EQ(statuses[r].ToString(),
                    "DataLoss: rank " + std::to_string(lowest) + ": bad " + std::to_string(lowest));
        }
      }
    }
  }
}

// Rank r's payload to rank q, from byte 1 (byte 0 is the status's).
std::string PairPayload(int r, int q) {
  return "?" + std::string(static_cast<size_t>(r + 2 * q), static_cast<char>('a' + r));
}

TEST(AllToAllAgreed, PayloadsInPlaceWhenAllOkElseTheLowestFailingRank) {
  for (int n = 1; n <= 4; ++n) {
    for (unsigned mask = 0; mask < (1u << n); ++mask) {
      std::vector<std::vector<std::string>> got(n);
      std::vector<Status> statuses = RunThreadRanks(n, [&](Comm& comm) {
        const int r = comm.rank();
        Status local = (mask >> r & 1) ? IOError("read of file " + std::to_string(r)) : OkStatus();
        std::vector<std::string> send(n);
        for (int q = 0; q < n; ++q) send[q] = PairPayload(r, q);
        Status agreed = AllToAllAgreed(comm, local, &send, &got[r]);
        SP_RETURN_IF_ERROR(comm.Barrier());  // the group stays usable
        return agreed;
      });
      for (int r = 0; r < n; ++r) {
        if (mask == 0) {
          ASSERT_TRUE(statuses[r].ok()) << statuses[r].ToString();
          ASSERT_EQ(got[r].size(), static_cast<size_t>(n));
          for (int q = 0; q < n; ++q) {
            EXPECT_EQ(got[r][q], std::string(1, '\0') + PairPayload(q, r).substr(1));
          }
        } else {
          const int lowest = __builtin_ctz(mask);
          EXPECT_EQ(statuses[r].ToString(), "IOError: rank " + std::to_string(lowest) +
                                                ": read of file " + std::to_string(lowest));
        }
      }
    }
  }
}

TEST(AllToAllAgreed, EmptyPayloadsCarryTheStatusByte) {
  std::vector<Status> statuses = RunThreadRanks(3, [&](Comm& comm) {
    std::vector<std::string> send(3), recv;
    SP_RETURN_IF_ERROR(AllToAllAgreed(comm, OkStatus(), &send, &recv));
    for (const std::string& p : recv) {
      if (p != std::string(1, '\0')) return InternalError("got " + std::to_string(p.size()));
    }
    return OkStatus();
  });
  for (const Status& s : statuses) EXPECT_TRUE(s.ok()) << s.ToString();
}

TEST(GatherAgreed, OnlyTheRootLearnsTheOutcome) {
  for (int root = 0; root < 3; ++root) {
    std::vector<std::vector<std::string>> got(3);
    std::vector<Status> statuses = RunThreadRanks(3, [&](Comm& comm) {
      const int r = comm.rank();
      return GatherAgreed(comm, OkStatus(), Payload(r), root, &got[r]);
    });
    for (int r = 0; r < 3; ++r) {
      EXPECT_TRUE(statuses[r].ok()) << statuses[r].ToString();
      if (r != root) continue;
      ASSERT_EQ(got[r].size(), 3u);
      for (int q = 0; q < 3; ++q) EXPECT_EQ(got[r][q], Payload(q));
    }
    statuses = RunThreadRanks(3, [&](Comm& comm) {
      const int r = comm.rank();
      Status local = r >= 1 ? IOError("disk " + std::to_string(r)) : OkStatus();
      return GatherAgreed(comm, local, Payload(r), root, &got[r]);
    });
    for (int r = 0; r < 3; ++r) {
      EXPECT_EQ(statuses[r].ToString(), r == root ? "IOError: rank 1: disk 1" : "OK");
    }
  }
}

TEST(BroadcastAgreed, DataOrTheRootsErrorEverywhere) {
  std::vector<std::string> data(4);
  std::vector<Status> statuses = RunThreadRanks(4, [&](Comm& comm) {
    if (comm.rank() == 2) data[2] = std::string("dir\0x", 5);
    return BroadcastAgreed(comm, OkStatus(), &data[comm.rank()], 2);
  });
  for (int r = 0; r < 4; ++r) {
    EXPECT_TRUE(statuses[r].ok());
    EXPECT_EQ(data[r], std::string("dir\0x", 5));
  }
  statuses = RunThreadRanks(4, [&](Comm& comm) {
    Status s = comm.rank() == 2 ? NotFoundError("no dir") : OkStatus();
    return BroadcastAgreed(comm, s, &data[comm.rank()], 2);
  });
  for (const Status& s : statuses) EXPECT_EQ(s.ToString(), "NotFound: rank 2: no dir");
}

TEST(BroadcastStatus, TheRootsStatusUnchanged) {
  for (const Status& sent : {OkStatus(), DataLossError("rank 3: flipped byte")}) {
    std::vector<Status> statuses = RunThreadRanks(4, [&](Comm& comm) {
      return BroadcastStatus(comm, comm.rank() == 0 ? sent : OkStatus(), 0);
    });
    for (const Status& s : statuses) EXPECT_EQ(s.ToString(), sent.ToString());
  }
}

}  // namespace
}  // namespace shardpoint::internal_comm
