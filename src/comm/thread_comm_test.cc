// The thread comm's own behaviour: departures, aborts, mismatched
// collectives, barriers as phase separators. What every Comm must do is in
// the conformance suite, run on thread comms by tests/comm/comm_conformance_test.cc.
#include "src/comm/thread_comm.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "shardpoint/comm.h"

namespace shardpoint::internal_comm {
namespace {

// Runs fn on n rank threads and expects every rank to return OK.
void RunOk(int n, const std::function<Status(Comm&)>& fn,
           std::chrono::milliseconds deadline = kDefaultCommDeadline) {
  std::vector<Status> statuses = RunThreadRanks(n, fn, deadline);
  ASSERT_EQ(statuses.size(), static_cast<size_t>(n));
  for (int r = 0; r < n; ++r)
    EXPECT_TRUE(statuses[r].ok()) << "rank " << r << ": " << statuses[r].ToString();
}

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

// The conformance suite checks that every rank fails; the thread comm also
// names the rank with the wrong count.
TEST(ThreadComm, AllToAllWithTheWrongPayloadCountNamesTheRank) {
  std::vector<Status> all = RunThreadRanks(3, [](Comm& comm) {
    std::vector<std::string> send(comm.rank() == 1 ? 2 : 3), recv;
    return comm.AllToAll(send, &recv);
  });
  for (const Status& s : all) {
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
    EXPECT_NE(s.message().find("rank 1"), std::string::npos) << s.ToString();
  }
}

TEST(ThreadComm, AllToAllViewsMixWithAllToAllAndStayValidDuringUse) {
  // Ranks 0 and 2 pass views of their own memory, rank 1 strings, over 3
  // collectives; each `use` sees every payload addressed to it, and each
  // rank rewrites its send memory right after the collective returns, so a
  // view read after a peer's return would see the next round's bytes.
  RunOk(3, [](Comm& comm) -> Status {
    auto* views = dynamic_cast<ViewAllToAll*>(&comm);
    EXPECT_NE(views, nullptr);
    const int me = comm.rank();
    std::vector<std::string> own(3), got;
    for (int round = 0; round < 3; ++round) {
      for (int to = 0; to < 3; ++to) {
        own[to] = std::to_string(round) + ":" + std::to_string(me) + "->" + std::to_string(to);
      }
      auto want = [&](int from) {
        return std::to_string(round) + ":" + std::to_string(from) + "->" + std::to_string(me);
      };
      if (me == 1) {
        SP_RETURN_IF_ERROR(comm.AllToAll(own, &got));
        for (int r = 0; r < 3; ++r) EXPECT_EQ(got[r], want(r));
      } else {
        const std::vector<std::string_view> send(own.begin(), own.end());
        int calls = 0;
        SP_RETURN_IF_ERROR(
            views->AllToAllViews(send, [&](const std::vector<std::string_view>& recv) {
              ++calls;
              std::this_thread::sleep_for(std::chrono::milliseconds(5));  // peers wait for it
              for (int r = 0; r < 3; ++r) EXPECT_EQ(recv[r], want(r));
              return OkStatus();
            }));
        EXPECT_EQ(calls, 1);
      }
      for (std::string& s : own) s.assign(s.size(), '#');  // the memory is spent
    }
    return OkStatus();
  });
}

TEST(ThreadComm, AllToAllViewsReturnUsesStatusAndNameABadRank) {
  std::vector<Status> all = RunThreadRanks(3, [](Comm& comm) {
    std::vector<std::string_view> send(comm.rank() == 2 ? 1 : 3);
    bool called = false;
    Status s = dynamic_cast<ViewAllToAll&>(comm).AllToAllViews(
        send, [&](const std::vector<std::string_view>&) {
          called = true;
          return OkStatus();
        });
    EXPECT_FALSE(called);
    return s;
  });
  for (const Status& s : all) {
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
    EXPECT_NE(s.message().find("rank 2"), std::string::npos) << s.ToString();
  }
  all = RunThreadRanks(2, [](Comm& comm) {
    std::vector<std::string_view> send(2, "x");
    return dynamic_cast<ViewAllToAll&>(comm).AllToAllViews(
        send, [&](const std::vector<std::string_view>&) {
          return comm.rank() == 1 ? DataLossError("placing") : OkStatus();
        });
  });
  EXPECT_TRUE(all[0].ok()) << all[0].ToString();
  EXPECT_EQ(all[1].code(), StatusCode::kDataLoss) << all[1].ToString();
}

TEST(ThreadComm, AllToAllPiecesArriveInOrderAsViewsOfTheSendersMemory) {
  // Rank r sends rank t the pieces "r", "->", t copies of "t" and one empty
  // piece; each receiver sees every sender's pieces in order, at the
  // sender's own addresses (no copy).
  RunOk(3, [](Comm& comm) -> Status {
    const int me = comm.rank();
    std::vector<std::string> words(3);
    std::vector<std::vector<std::string_view>> send(3);
    const std::string from = std::to_string(me);
    for (int to = 0; to < 3; ++to) {
      words[to] = std::to_string(to);
      send[to] = {from, "->"};
      for (int k = 0; k < to; ++k) send[to].push_back(words[to]);
      send[to].push_back(std::string_view());
    }
    // The views are read inside `use` only: the senders' memory (their
    // strings, on their stacks) is gone once they return.
    int calls = 0;
    SP_RETURN_IF_ERROR(dynamic_cast<ViewAllToAll&>(comm).AllToAllPieces(
        send, [&](const std::vector<std::vector<std::string_view>>& got) {
          ++calls;
          EXPECT_EQ(got.size(), 3u);
          for (int r = 0; r < 3 && r < static_cast<int>(got.size()); ++r) {
            EXPECT_EQ(got[r].size(), static_cast<size_t>(me + 3)) << "from rank " << r;
            if (got[r].size() != static_cast<size_t>(me + 3)) continue;
            EXPECT_EQ(got[r][0], std::to_string(r));
            EXPECT_EQ(got[r][1], "->");
            for (int k = 0; k < me; ++k) EXPECT_EQ(got[r][2 + k], std::to_string(me));
            EXPECT_TRUE(got[r].back().empty());
          }
          // Our pieces to ourselves are our own memory.
          if (got.size() == 3 && !got[me].empty()) {
            EXPECT_EQ(got[me][0].data(), from.data());
          }
          return OkStatus();
        }));
    EXPECT_EQ(calls, 1);
    return OkStatus();
  });
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

// Ranks 2 and 3 neither arrive nor depart (hung, or a process gone): the
// others fail within the deadline with DeadlineExceeded naming them, and so
// does every later collective, the late ranks' included.
TEST(ThreadComm, CollectivePastItsDeadlineNamesTheRanksThatDidNotArrive) {
  const auto deadline = std::chrono::milliseconds(200);
  std::vector<std::unique_ptr<Comm>> comms = MakeThreadComms(4, deadline);
  std::vector<Status> statuses(2);
  std::vector<double> waited(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      const auto start = std::chrono::steady_clock::now();
      std::vector<std::string> all;
      statuses[r] = comms[r]->AllGather("x", &all);
      waited[r] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(statuses[r].code(), StatusCode::kDeadlineExceeded) << statuses[r].ToString();
    EXPECT_THAT(statuses[r].message(),
                ::testing::HasSubstr("collective #1 (AllGather) did not complete within its "
                                     "deadline of 200 ms: ranks 2, 3 did not arrive"));
    EXPECT_GE(waited[r], 0.15);
    EXPECT_LT(waited[r], 5.0);
  }
  EXPECT_EQ(comms[3]->Barrier().code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(comms[0]->Barrier().ToString(), statuses[0].ToString());
}

TEST(ThreadComm, RanksThatArriveInTimeAreNotCutShort) {
  // Rank 1 arrives 100 ms late, inside a 2 s deadline: every rank succeeds.
  RunOk(
      2,
      [](Comm& comm) -> Status {
        if (comm.rank() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(100));
        return comm.Barrier();
      },
      std::chrono::seconds(2));
}

}  // namespace
}  // namespace shardpoint::internal_comm
