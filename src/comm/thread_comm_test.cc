#include "src/comm/thread_comm.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "shardpoint/comm.h"

namespace shardpoint::internal {
namespace {

// Bytes that identify (rank, round) everywhere, so any mix-up is visible.
std::string Payload(int rank, int round, size_t size) {
  std::string s(size, '\0');
  for (size_t i = 0; i < size; ++i) s[i] = static_cast<char>(rank * 131 + round * 7 + i * 13);
  if (size >= 2 * sizeof(int)) {
    std::memcpy(s.data(), &rank, sizeof(int));
    std::memcpy(s.data() + sizeof(int), &round, sizeof(int));
  }
  return s;
}

// Runs fn on n rank threads and expects every rank to return OK.
void RunOk(int n, const std::function<Status(Comm&)>& fn) {
  std::vector<Status> statuses = RunThreadRanks(n, fn);
  ASSERT_EQ(statuses.size(), static_cast<size_t>(n));
  for (int r = 0; r < n; ++r)
    EXPECT_TRUE(statuses[r].ok()) << "rank " << r << ": " << statuses[r].ToString();
}

const size_t kSizes[] = {0, 1, 7, 8, 100, 4096, 1 << 20};

TEST(ThreadComm, RankAndSize) {
  for (int n = 1; n <= 8; ++n) {
    std::vector<std::unique_ptr<Comm>> comms = MakeThreadComms(n);
    ASSERT_EQ(comms.size(), static_cast<size_t>(n));
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(comms[r]->rank(), r);
      EXPECT_EQ(comms[r]->size(), n);
    }
  }
  EXPECT_TRUE(MakeThreadComms(0).empty());
  EXPECT_TRUE(RunThreadRanks(0, [](Comm&) { return OkStatus(); }).empty());
}

TEST(ThreadComm, AllGather) {
  for (int n = 1; n <= 8; ++n) {
    RunOk(n, [&](Comm& comm) -> Status {
      for (size_t size : kSizes) {
        std::vector<std::string> all = {"stale"};
        SP_RETURN_IF_ERROR(comm.AllGather(Payload(comm.rank(), 0, size), &all));
        EXPECT_EQ(all.size(), static_cast<size_t>(n));
        for (int r = 0; r < n && r < static_cast<int>(all.size()); ++r) {
          EXPECT_EQ(all[r], Payload(r, 0, size)) << "n=" << n << " size=" << size;
        }
      }
      return OkStatus();
    });
  }
}

TEST(ThreadComm, AllGatherVariedSizesPerRank) {
  RunOk(5, [](Comm& comm) -> Status {
    std::vector<std::string> all;
    SP_RETURN_IF_ERROR(comm.AllGather(Payload(comm.rank(), 1, comm.rank() * 1000), &all));
    for (int r = 0; r < 5; ++r) EXPECT_EQ(all[r], Payload(r, 1, r * 1000));
    return OkStatus();
  });
}

// Payload from `from` to `to`: distinct per pair, sizes varying (some empty).
std::string PairPayload(int from, int to) {
  return Payload(from * 16 + to, 0, (from + 2 * to) % 5 * 3);
}

// Forwards everything but AllToAll, so that Comm's AllGather-based default runs.
class DefaultAllToAll : public Comm {
 public:
  explicit DefaultAllToAll(Comm& base) : base_(base) {}
  int rank() const override { return base_.rank(); }
  int size() const override { return base_.size(); }
  Status AllGather(std::string_view mine, std::vector<std::string>* all) override {
    return base_.AllGather(mine, all);
  }
  Status Gather(std::string_view mine, int root, std::vector<std::string>* all) override {
    return base_.Gather(mine, root, all);
  }
  Status Broadcast(std::string* data, int root) override { return base_.Broadcast(data, root); }
  Status Barrier() override { return base_.Barrier(); }

 private:
  Comm& base_;
};

Status CheckAllToAll(Comm& comm) {
  std::vector<std::string> send(comm.size()), recv;
  for (int to = 0; to < comm.size(); ++to) send[to] = PairPayload(comm.rank(), to);
  SP_RETURN_IF_ERROR(comm.AllToAll(send, &recv));
  if (static_cast<int>(recv.size()) != comm.size()) return InternalError("recv size");
  for (int from = 0; from < comm.size(); ++from) {
    if (recv[from] != PairPayload(from, comm.rank())) {
      return InternalError("rank " + std::to_string(comm.rank()) + ": wrong payload from " +
                           std::to_string(from));
    }
  }
  return OkStatus();
}

TEST(ThreadComm, AllToAllDeliversEachPayloadToItsDestination) {
  for (int n : {1, 2, 5}) RunOk(n, [](Comm& comm) { return CheckAllToAll(comm); });
}

TEST(ThreadComm, DefaultAllToAllOverAllGatherAgrees) {
  for (int n : {1, 3, 4}) {
    RunOk(n, [](Comm& comm) {
      DefaultAllToAll wrapped(comm);
      return CheckAllToAll(wrapped);
    });
  }
}

TEST(ThreadComm, AllToAllWithTheWrongPayloadCountFailsOnEveryRank) {
  std::vector<Status> all = RunThreadRanks(3, [](Comm& comm) {
    std::vector<std::string> send(comm.rank() == 1 ? 2 : 3), recv;
    return comm.AllToAll(send, &recv);
  });
  for (const Status& s : all) {
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
    EXPECT_NE(s.message().find("rank 1"), std::string::npos) << s.ToString();
  }
}

TEST(ThreadComm, Gather) {
  for (int n = 1; n <= 8; ++n) {
    RunOk(n, [&](Comm& comm) -> Status {
      for (int root = 0; root < n; ++root) {
        for (size_t size : kSizes) {
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
}

TEST(ThreadComm, GatherNonRootMayPassNull) {
  RunOk(3, [](Comm& comm) -> Status {
    std::vector<std::string> all;
    SP_RETURN_IF_ERROR(comm.Gather("x", 1, comm.rank() == 1 ? &all : nullptr));
    if (comm.rank() == 1) {
      EXPECT_EQ(all, (std::vector<std::string>{"x", "x", "x"}));
    }
    return OkStatus();
  });
}

TEST(ThreadComm, Broadcast) {
  for (int n = 1; n <= 8; ++n) {
    RunOk(n, [&](Comm& comm) -> Status {
      for (int root = 0; root < n; ++root) {
        for (size_t size : kSizes) {
          std::string data = comm.rank() == root ? Payload(root, 3, size) : "garbage";
          SP_RETURN_IF_ERROR(comm.Broadcast(&data, root));
          EXPECT_EQ(data, Payload(root, 3, size)) << "n=" << n << " root=" << root;
        }
      }
      return OkStatus();
    });
  }
}

TEST(ThreadComm, BarrierSeparatesPhases) {
  for (int n = 1; n <= 8; ++n) {
    std::atomic<int> before{0};
    RunOk(n, [&](Comm& comm) -> Status {
      for (int round = 1; round <= 20; ++round) {
        before.fetch_add(1);
        SP_RETURN_IF_ERROR(comm.Barrier());
        // Nobody may be past this barrier before everyone reached it.
        EXPECT_GE(before.load(), round * n);
        SP_RETURN_IF_ERROR(comm.Barrier());
      }
      return OkStatus();
    });
  }
}

// 1000 rounds of mixed collectives: each round's payload names its round, so
// a payload leaking from one round into another is caught.
TEST(ThreadComm, ManyRoundsNeverMix) {
  for (int n : {2, 3, 8}) {
    RunOk(n, [&](Comm& comm) -> Status {
      for (int round = 0; round < 1000; ++round) {
        const size_t size = 8 + (round * 37 + comm.rank()) % 64;
        const int root = round % n;
        switch (round % 4) {
          case 0: {
            std::vector<std::string> all;
            SP_RETURN_IF_ERROR(comm.AllGather(Payload(comm.rank(), round, size), &all));
            for (int r = 0; r < n; ++r) {
              EXPECT_EQ(all[r], Payload(r, round, 8 + (round * 37 + r) % 64));
            }
            break;
          }
          case 1: {
            std::vector<std::string> all;
            SP_RETURN_IF_ERROR(comm.Gather(Payload(comm.rank(), round, size), root, &all));
            if (comm.rank() == root) {
              for (int r = 0; r < n; ++r) {
                EXPECT_EQ(all[r], Payload(r, round, 8 + (round * 37 + r) % 64));
              }
            }
            break;
          }
          case 2: {
            std::string data = comm.rank() == root ? Payload(root, round, size) : "";
            SP_RETURN_IF_ERROR(comm.Broadcast(&data, root));
            EXPECT_EQ(data, Payload(root, round, 8 + (round * 37 + root) % 64));
            break;
          }
          case 3:
            SP_RETURN_IF_ERROR(comm.Barrier());
            break;
        }
        if (::testing::Test::HasFailure()) return InternalError("mismatch");
      }
      return OkStatus();
    });
  }
}

TEST(ThreadComm, SmallCollectivesAreFast) {
  const auto start = std::chrono::steady_clock::now();
  RunOk(8, [](Comm& comm) -> Status {
    std::vector<std::string> all;
    for (int i = 0; i < 2000; ++i) SP_RETURN_IF_ERROR(comm.AllGather("abc", &all));
    return OkStatus();
  });
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // Thousands per second even on an oversubscribed, sanitized test machine.
  EXPECT_LT(seconds, 10.0);
}

TEST(ThreadComm, BadRootIsInvalidArgument) {
  std::vector<std::unique_ptr<Comm>> comms = MakeThreadComms(2);
  std::string data;
  std::vector<std::string> all;
  EXPECT_EQ(comms[0]->Broadcast(&data, 2).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(comms[0]->Gather("", -1, &all).code(), StatusCode::kInvalidArgument);
}

bool FinishesWithin(std::chrono::seconds limit, const std::function<void()>& fn) {
  const auto start = std::chrono::steady_clock::now();
  fn();
  return std::chrono::steady_clock::now() - start < limit;
}

TEST(ThreadComm, DepartedRankFailsOthersInsteadOfHanging) {
  for (int n : {2, 4, 8}) {
    for (int leaver = 0; leaver < n; leaver += n - 1) {
      std::vector<Status> statuses;
      EXPECT_TRUE(FinishesWithin(std::chrono::seconds(5), [&] {
        statuses = RunThreadRanks(n, [&](Comm& comm) -> Status {
          if (comm.rank() == leaver) return IOError("disk on fire");
          std::vector<std::string> all;
          return comm.AllGather("x", &all);
        });
      }));
      for (int r = 0; r < n; ++r) {
        if (r == leaver) {
          EXPECT_EQ(statuses[r].code(), StatusCode::kIOError);
          continue;
        }
        EXPECT_EQ(statuses[r].code(), StatusCode::kFailedPrecondition);
        EXPECT_EQ(statuses[r].message(),
                  "rank " + std::to_string(leaver) + " left the group before collective #1");
      }
    }
  }
}

TEST(ThreadComm, DepartureMidSequenceNamesTheCollective) {
  std::vector<Status> statuses;
  EXPECT_TRUE(FinishesWithin(std::chrono::seconds(5), [&] {
    statuses = RunThreadRanks(4, [](Comm& comm) -> Status {
      const int rounds = comm.rank() == 3 ? 5 : 10;
      for (int i = 0; i < rounds; ++i) SP_RETURN_IF_ERROR(comm.Barrier());
      return OkStatus();
    });
  }));
  EXPECT_TRUE(statuses[3].ok());
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(statuses[r].message(), "rank 3 left the group before collective #6");
  }
}

TEST(ThreadComm, NormalExitAfterLastCollectiveIsFine) {
  for (int i = 0; i < 200; ++i) {
    RunOk(4, [](Comm& comm) -> Status {
      std::string data = "v";
      return comm.Broadcast(&data, 0);
    });
  }
}

TEST(ThreadComm, DestroyedCommDeparts) {
  std::vector<std::unique_ptr<Comm>> comms = MakeThreadComms(2);
  comms[1].reset();
  EXPECT_EQ(comms[0]->Barrier().message(), "rank 1 left the group before collective #1");
}

TEST(ThreadComm, AbortWakesWaitersAndPoisonsFutureCollectives) {
  auto group = std::make_shared<ThreadGroup>(4);
  std::vector<std::unique_ptr<Comm>> comms = MakeThreadGroupComms(group);
  std::vector<Status> statuses(3);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      std::vector<std::string> all;
      statuses[r] = comms[r]->AllGather("x", &all);
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  group->Abort(IOError("stop"));
  for (std::thread& t : threads) t.join();
  for (const Status& s : statuses) EXPECT_EQ(s.ToString(), "IOError: stop");
  EXPECT_EQ(comms[3]->Barrier().ToString(), "IOError: stop");
  group->Abort(DataLossError("second"));  // the first poison wins
  EXPECT_EQ(comms[0]->Barrier().ToString(), "IOError: stop");
}

TEST(ThreadComm, MismatchedCollectivesFailOnAllRanks) {
  std::vector<Status> statuses = RunThreadRanks(3, [](Comm& comm) -> Status {
    if (comm.rank() == 2) return comm.Barrier();
    std::string data = "d";
    return comm.Broadcast(&data, 0);
  });
  for (const Status& s : statuses) {
    EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
    EXPECT_EQ(s.message(),
              "collective #1 mismatch: rank 0 called Broadcast(root 0), rank 2 called Barrier");
  }
}

TEST(ThreadComm, MismatchedRootsFail) {
  std::vector<Status> statuses = RunThreadRanks(2, [](Comm& comm) -> Status {
    std::string data = "d";
    return comm.Broadcast(&data, comm.rank());
  });
  for (const Status& s : statuses) EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace shardpoint::internal
