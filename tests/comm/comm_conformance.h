// The Comm conformance suite: one set of tests every Comm implementation
// passes unchanged. A binary includes this header in exactly one file and
// instantiates the suite with its transports:
//   INSTANTIATE_TEST_SUITE_P(Thread, CommConformance, ::testing::Values(...),
//                            CommTransportName);
// shardpoint_tests runs it on the single comm and the thread comm (N = 1, 2,
// 4: tests/comm/comm_conformance_test.cc); tests/mpi/comm_conformance_check.cc
// runs it on the MPI comm under mpirun (np 2, 3, 4).
//
// Each test is a body run on every rank of the group; a transport hosts some
// of those ranks in this process (thread comm: all; MPI: one) and returns
// their statuses. Payloads name their (rank, round), so a mix-up shows.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "shardpoint/comm.h"
#include "tests/testing/forwarding_comm.h"

namespace shardpoint::testing {

using RankBody = std::function<Status(Comm&)>;

struct CommTransport {
  std::string name;
  // Runs `body` on every rank this process hosts; their statuses, in order.
  std::function<std::vector<Status>(const RankBody& body)> run;
};

inline std::string CommTransportName(const ::testing::TestParamInfo<CommTransport>& info) {
  return info.param.name;
}

// Bytes that identify (rank, round) everywhere.
inline std::string Payload(int rank, int round, size_t size) {
  std::string s(size, '\0');
  for (size_t i = 0; i < size; ++i) s[i] = static_cast<char>(rank * 131 + round * 7 + i * 13);
  if (size >= 2 * sizeof(int)) {
    std::memcpy(s.data(), &rank, sizeof(int));
    std::memcpy(s.data() + sizeof(int), &round, sizeof(int));
  }
  return s;
}

// A 64 MiB payload naming (rank, round) in its first 8 bytes: one pattern
// built once, copied, so that the large tests stay fast.
inline constexpr size_t kLarge = size_t{64} << 20;
inline const std::string& LargeBase() {
  static const std::string* const kBase = new std::string(Payload(-1, -1, kLarge));
  return *kBase;
}
inline std::string LargePayload(int rank, int round) {
  std::string s = LargeBase();
  std::memcpy(s.data(), &rank, sizeof(int));
  std::memcpy(s.data() + sizeof(int), &round, sizeof(int));
  return s;
}
// Whether s is LargePayload(rank, round), without building it.
inline bool IsLargePayload(const std::string& s, int rank, int round) {
  int head[2];
  if (s.size() != kLarge) return false;
  std::memcpy(head, s.data(), sizeof(head));
  return head[0] == rank && head[1] == round &&
         std::memcmp(s.data() + sizeof(head), LargeBase().data() + sizeof(head),
                     kLarge - sizeof(head)) == 0;
}

// From `from` to `to`: distinct per pair, sizes varying by pair (some empty).
inline std::string PairPayload(int from, int to) {
  return Payload(from * 16 + to, 2, (from + 2 * to) % 5 * 1000);
}

// Forwards everything but AllToAll, so that Comm's AllGather-based default runs.
class DefaultAllToAll : public testing::ForwardingComm {
 public:
  using ForwardingComm::ForwardingComm;
  Status AllToAll(const std::vector<std::string>& send, std::vector<std::string>* recv) override {
    return Comm::AllToAll(send, recv);
  }
};

class CommConformance : public ::testing::TestWithParam<CommTransport> {
 protected:
  std::vector<Status> Run(const RankBody& body) { return GetParam().run(body); }
  // Runs body on the hosted ranks and expects each to return OK.
  void RunOk(const RankBody& body) {
    std::vector<Status> statuses = Run(body);
    ASSERT_FALSE(statuses.empty());
    for (size_t i = 0; i < statuses.size(); ++i) {
      EXPECT_TRUE(statuses[i].ok()) << "hosted rank " << i << ": " << statuses[i].ToString();
    }
  }
};

inline constexpr size_t kConformanceSizes[] = {0, 1, 7, 8, 100, 4096, 1 << 20};
TEST_P(CommConformance, RankAndSizeAgreeAcrossTheGroup) {
  RunOk([](Comm& comm) -> Status {
    EXPECT_GE(comm.size(), 1);
    EXPECT_GE(comm.rank(), 0);
    EXPECT_LT(comm.rank(), comm.size());
    std::vector<std::string> all;
    SP_RETURN_IF_ERROR(
        comm.AllGather(std::to_string(comm.rank()) + "/" + std::to_string(comm.size()), &all));
    EXPECT_EQ(all.size(), static_cast<size_t>(comm.size()));
    for (int r = 0; r < static_cast<int>(all.size()); ++r) {
      EXPECT_EQ(all[r], std::to_string(r) + "/" + std::to_string(comm.size()));
    }
    return OkStatus();
  });
}

TEST_P(CommConformance, AllGather) {
  RunOk([](Comm& comm) -> Status {
    const int n = comm.size();
    for (size_t size : kConformanceSizes) {
      std::vector<std::string> all = {"stale"};
      SP_RETURN_IF_ERROR(comm.AllGather(Payload(comm.rank(), 0, size), &all));
      EXPECT_EQ(all.size(), static_cast<size_t>(n));
      for (int r = 0; r < n && r < static_cast<int>(all.size()); ++r) {
        EXPECT_EQ(all[r], Payload(r, 0, size)) << "size " << size;
      }
    }
    return OkStatus();
  });
}

TEST_P(CommConformance, AllGatherSizesDifferPerRank) {
  RunOk([](Comm& comm) -> Status {
    std::vector<std::string> all;
    SP_RETURN_IF_ERROR(comm.AllGather(Payload(comm.rank(), 1, comm.rank() * 1000), &all));
    EXPECT_EQ(all.size(), static_cast<size_t>(comm.size()));
    for (int r = 0; r < comm.size() && r < static_cast<int>(all.size()); ++r) {
      EXPECT_EQ(all[r], Payload(r, 1, r * 1000));
    }
    return OkStatus();
  });
}

TEST_P(CommConformance, EmptyPayloadsEverywhere) {
  RunOk([](Comm& comm) -> Status {
    const int n = comm.size();
    std::vector<std::string> all = {"stale"};
    SP_RETURN_IF_ERROR(comm.AllGather("", &all));
    EXPECT_EQ(all, std::vector<std::string>(n));
    std::string data = comm.rank() == 0 ? "" : "garbage";
    SP_RETURN_IF_ERROR(comm.Broadcast(&data, 0));
    EXPECT_EQ(data, "");
    std::vector<std::string> gathered;
    SP_RETURN_IF_ERROR(comm.Gather("", n - 1, &gathered));
    if (comm.rank() == n - 1) {
      EXPECT_EQ(gathered, std::vector<std::string>(n));
    }
    std::vector<std::string> recv = {"stale"};
    SP_RETURN_IF_ERROR(comm.AllToAll(std::vector<std::string>(n), &recv));
    EXPECT_EQ(recv, std::vector<std::string>(n));
    return OkStatus();
  });
}

// 64 MiB through each collective, from one rank while the others send little
// or nothing.
TEST_P(CommConformance, LargePayloads) {
  RunOk([](Comm& comm) -> Status {
    const int n = comm.size(), me = comm.rank(), big = n - 1;
    std::string data = me == big ? LargePayload(big, 4) : "";
    SP_RETURN_IF_ERROR(comm.Broadcast(&data, big));
    EXPECT_TRUE(IsLargePayload(data, big, 4)) << "broadcast of 64 MiB differs";
    data.clear();
    data.shrink_to_fit();

    std::vector<std::string> all;
    SP_RETURN_IF_ERROR(comm.AllGather(me == 0 ? LargePayload(0, 5) : Payload(me, 5, 3), &all));
    EXPECT_EQ(all.size(), static_cast<size_t>(n));
    for (int r = 0; r < n && r < static_cast<int>(all.size()); ++r) {
      EXPECT_TRUE(r == 0 ? IsLargePayload(all[r], 0, 5) : all[r] == Payload(r, 5, 3))
          << "all-gather from " << r;
    }
    all.clear();

    // Rank 0 sends 64 MiB to the last rank; every other pair exchanges a few bytes.
    auto is_large = [&](int from, int to) { return from == 0 && to == big; };
    std::vector<std::string> send(n), recv;
    for (int to = 0; to < n; ++to) {
      send[to] = is_large(me, to) ? LargePayload(to, 6) : Payload(me * 16 + to, 6, 5);
    }
    SP_RETURN_IF_ERROR(comm.AllToAll(send, &recv));
    send.clear();
    EXPECT_EQ(recv.size(), static_cast<size_t>(n));
    for (int from = 0; from < n && from < static_cast<int>(recv.size()); ++from) {
      EXPECT_TRUE(is_large(from, me) ? IsLargePayload(recv[from], me, 6)
                                     : recv[from] == Payload(from * 16 + me, 6, 5))
          << "all-to-all from " << from;
    }
    return OkStatus();
  });
}

Status CheckAllToAll(Comm& comm) {
  std::vector<std::string> send(comm.size()), recv = {"stale"};
  for (int to = 0; to < comm.size(); ++to) send[to] = PairPayload(comm.rank(), to);
  SP_RETURN_IF_ERROR(comm.AllToAll(send, &recv));
  EXPECT_EQ(recv.size(), static_cast<size_t>(comm.size()));
  for (int from = 0; from < comm.size() && from < static_cast<int>(recv.size()); ++from) {
    EXPECT_EQ(recv[from], PairPayload(from, comm.rank())) << "from " << from;
  }
  return OkStatus();
}

TEST_P(CommConformance, AllToAllDeliversEachPayloadToItsDestination) {
  RunOk([](Comm& comm) { return CheckAllToAll(comm); });
}

TEST_P(CommConformance, DefaultAllToAllOverAllGatherAgrees) {
  RunOk([](Comm& comm) {
    DefaultAllToAll wrapped(comm);
    return CheckAllToAll(wrapped);
  });
}

// A caller that exchanges round after round (a recovery's rounds) passes the
// same recv: its strings' memory is reused, not freed and allocated again.
TEST_P(CommConformance, DefaultAllToAllReusesTheReceiveBuffers) {
  RunOk([](Comm& comm) -> Status {
    DefaultAllToAll wrapped(comm);
    std::vector<std::string> recv(comm.size());
    std::vector<const char*> before;
    for (std::string& r : recv) {
      r.reserve(8192);
      before.push_back(r.data());
    }
    SP_RETURN_IF_ERROR(CheckAllToAll(wrapped));  // another call between: no effect on recv
    std::vector<std::string> send(comm.size());
    for (int to = 0; to < comm.size(); ++to) send[to] = PairPayload(comm.rank(), to);
    SP_RETURN_IF_ERROR(wrapped.AllToAll(send, &recv));
    for (int from = 0; from < comm.size(); ++from) {
      EXPECT_EQ(recv[from], PairPayload(from, comm.rank())) << "from " << from;
      EXPECT_EQ(static_cast<const void*>(recv[from].data()), before[from]) << "from " << from;
    }
    return OkStatus();
  });
}

TEST_P(CommConformance, AllToAllWithTheWrongPayloadCountFailsOnEveryRank) {
  for (const Status& s : Run([](Comm& comm) {
         std::vector<std::string> send(comm.rank() == 0 ? comm.size() + 1 : comm.size()), recv;
         return comm.AllToAll(send, &recv);
       })) {
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
    EXPECT_NE(s.message().find("AllToAll"), std::string::npos) << s.ToString();
  }
  RunOk([](Comm& comm) { return comm.Barrier(); });  // the group is still usable
}

TEST_P(CommConformance, Gather) {
  RunOk([](Comm& comm) -> Status {
    const int n = comm.size();
    for (int root = 0; root < n; ++root) {
      for (size_t size : kConformanceSizes) {
        std::vector<std::string> all = {"untouched"};
        SP_RETURN_IF_ERROR(comm.Gather(Payload(comm.rank(), root, size), root, &all));
        if (comm.rank() != root) {
          EXPECT_EQ(all, std::vector<std::string>{"untouched"});
          continue;
        }
        EXPECT_EQ(all.size(), static_cast<size_t>(n));
        for (int r = 0; r < n && r < static_cast<int>(all.size()); ++r) {
          EXPECT_EQ(all[r], Payload(r, root, size));
        }
      }
    }
    return OkStatus();
  });
}

TEST_P(CommConformance, Broadcast) {
  RunOk([](Comm& comm) -> Status {
    for (int root = 0; root < comm.size(); ++root) {
      for (size_t size : kConformanceSizes) {
        std::string data = comm.rank() == root ? Payload(root, 3, size) : "garbage";
        SP_RETURN_IF_ERROR(comm.Broadcast(&data, root));
        EXPECT_EQ(data, Payload(root, 3, size)) << "root " << root << " size " << size;
      }
    }
    return OkStatus();
  });
}

TEST_P(CommConformance, BadRootIsInvalidArgumentAndLeavesTheGroupUsable) {
  RunOk([](Comm& comm) -> Status {
    SP_RETURN_IF_ERROR(comm.Barrier());
    std::string data;
    EXPECT_EQ(comm.Broadcast(&data, comm.size()).code(), StatusCode::kInvalidArgument);
    std::vector<std::string> all;
    EXPECT_EQ(comm.Gather("", -1, &all).code(), StatusCode::kInvalidArgument);
    return comm.Barrier();
  });
}

// 1000 rounds of mixed collectives: each round's payload names its round, so
// a payload leaking from one round into another is caught.
TEST_P(CommConformance, ManyRoundsNeverMix) {
  RunOk([](Comm& comm) -> Status {
    const int n = comm.size();
    auto size_of = [](int round, int r) { return size_t(8 + (round * 37 + r) % 64); };
    for (int round = 0; round < 1000; ++round) {
      const int root = round % n;
      switch (round % 5) {
        case 0: {
          std::vector<std::string> all;
          SP_RETURN_IF_ERROR(
              comm.AllGather(Payload(comm.rank(), round, size_of(round, comm.rank())), &all));
          for (int r = 0; r < n; ++r) EXPECT_EQ(all[r], Payload(r, round, size_of(round, r)));
          break;
        }
        case 1: {
          std::vector<std::string> all;
          SP_RETURN_IF_ERROR(
              comm.Gather(Payload(comm.rank(), round, size_of(round, comm.rank())), root, &all));
          if (comm.rank() == root) {
            for (int r = 0; r < n; ++r) EXPECT_EQ(all[r], Payload(r, round, size_of(round, r)));
          }
          break;
        }
        case 2: {
          std::string data = comm.rank() == root ? Payload(root, round, size_of(round, root)) : "";
          SP_RETURN_IF_ERROR(comm.Broadcast(&data, root));
          EXPECT_EQ(data, Payload(root, round, size_of(round, root)));
          break;
        }
        case 3: {
          std::vector<std::string> send(n), recv;
          for (int to = 0; to < n; ++to) send[to] = Payload(comm.rank() * 16 + to, round, to);
          SP_RETURN_IF_ERROR(comm.AllToAll(send, &recv));
          for (int from = 0; from < n; ++from) {
            EXPECT_EQ(recv[from], Payload(from * 16 + comm.rank(), round, comm.rank()));
          }
          break;
        }
        case 4:
          SP_RETURN_IF_ERROR(comm.Barrier());
          break;
      }
      if (::testing::Test::HasFailure())
        return InternalError("mismatch in round " + std::to_string(round));
    }
    return OkStatus();
  });
}

TEST_P(CommConformance, AgreeOnStatusLowestFailingRankWins) {
  RunOk([](Comm& comm) -> Status {
    const int n = comm.size(), me = comm.rank();
    EXPECT_TRUE(AgreeOnStatus(comm, OkStatus()).ok());
    for (int failing = 0; failing < n; ++failing) {
      // Every rank from `failing` up fails; the lowest one wins everywhere.
      Status local =
          me >= failing ? Status(StatusCode::kDataLoss, "bad " + std::to_string(me)) : OkStatus();
      Status agreed = AgreeOnStatus(comm, local);
      EXPECT_EQ(agreed.code(), StatusCode::kDataLoss);
      EXPECT_EQ(agreed.message(),
                "rank " + std::to_string(failing) + ": bad " + std::to_string(failing));
    }
    // Only the last rank fails, with another code.
    Status agreed = AgreeOnStatus(comm, me == n - 1 ? NotFoundError("gone") : OkStatus());
    EXPECT_EQ(agreed.ToString(), "NotFound: rank " + std::to_string(n - 1) + ": gone");
    // The group stays usable after agreeing on an error.
    EXPECT_TRUE(AgreeOnStatus(comm, OkStatus()).ok());
    return comm.Barrier();
  });
}

}  // namespace shardpoint::testing
