#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "shardpoint/comm.h"

namespace shardpoint {
namespace {

TEST(AgreeOnStatus, AllOk) {
  EXPECT_TRUE(AgreeOnStatus(*MakeSingleComm(), OkStatus()).ok());
  for (int n = 1; n <= 8; ++n) {
    std::vector<Status> statuses =
        RunThreadRanks(n, [](Comm& comm) { return AgreeOnStatus(comm, OkStatus()); });
    for (const Status& s : statuses) EXPECT_TRUE(s.ok()) << s.ToString();
  }
}

TEST(AgreeOnStatus, SingleRankError) {
  Status s = AgreeOnStatus(*MakeSingleComm(), NotFoundError("no such key"));
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "rank 0: no such key");
}

// Every subset of failing ranks for n up to 8 (as bit masks): all ranks agree
// on the lowest failing rank's error, with its code.
TEST(AgreeOnStatus, LowestFailingRankWins) {
  const StatusCode codes[] = {
      StatusCode::kInvalidArgument, StatusCode::kNotFound,           StatusCode::kIOError,
      StatusCode::kDataLoss,        StatusCode::kFailedPrecondition, StatusCode::kInternal,
      StatusCode::kDeadlineExceeded};
  for (int n = 1; n <= 8; ++n) {
    for (unsigned mask = 0; mask < (1u << n); mask += (n > 5 ? 7 : 1)) {
      auto local = [&](int r) {
        if (!(mask >> r & 1)) return OkStatus();
        return Status(codes[r % 7], "failure on " + std::to_string(r));
      };
      std::vector<Status> statuses = RunThreadRanks(n, [&](Comm& comm) {
        Status agreed = AgreeOnStatus(comm, local(comm.rank()));
        // The group stays usable after agreeing on an error.
        SP_RETURN_IF_ERROR(comm.Barrier());
        return agreed;
      });
      for (int r = 0; r < n; ++r) {
        if (mask == 0) {
          EXPECT_TRUE(statuses[r].ok());
          continue;
        }
        const int lowest = __builtin_ctz(mask);
        EXPECT_EQ(statuses[r].code(), codes[lowest % 7]);
        EXPECT_EQ(statuses[r].message(),
                  "rank " + std::to_string(lowest) + ": failure on " + std::to_string(lowest));
      }
    }
  }
}

TEST(AgreeOnStatus, EmptyAndBinaryMessages) {
  const std::string binary("a\0b\xff", 4);
  std::vector<Status> statuses = RunThreadRanks(3, [&](Comm& comm) {
    if (comm.rank() == 1) return AgreeOnStatus(comm, DataLossError(""));
    if (comm.rank() == 2) return AgreeOnStatus(comm, IOError(binary));
    return AgreeOnStatus(comm, OkStatus());
  });
  for (const Status& s : statuses) EXPECT_EQ(s.ToString(), "DataLoss: rank 1: ");
  statuses = RunThreadRanks(3, [&](Comm& comm) {
    return AgreeOnStatus(comm, comm.rank() == 2 ? IOError(binary) : OkStatus());
  });
  for (const Status& s : statuses) EXPECT_EQ(s.message(), "rank 2: " + binary);
}

TEST(AgreeOnStatus, ManyRounds) {
  std::vector<Status> statuses = RunThreadRanks(4, [](Comm& comm) -> Status {
    for (int round = 0; round < 1000; ++round) {
      const int failing = round % 5;  // 4 means nobody fails
      Status local = comm.rank() >= failing ? InternalError(std::to_string(round)) : OkStatus();
      Status agreed = AgreeOnStatus(comm, local);
      if (failing == 4) {
        EXPECT_TRUE(agreed.ok());
      } else {
        EXPECT_EQ(agreed.message(),
                  "rank " + std::to_string(failing) + ": " + std::to_string(round));
      }
    }
    return OkStatus();
  });
  for (const Status& s : statuses) EXPECT_TRUE(s.ok());
}

// A Comm whose AllGather returns canned results, to test decoding.
class FakeComm final : public Comm {
 public:
  Status result;
  std::vector<std::string> gathered;
  int rank() const override { return 0; }
  int size() const override { return static_cast<int>(gathered.size()); }
  Status AllGather(std::string_view, std::vector<std::string>* all) override {
    *all = gathered;
    return result;
  }
  Status Gather(std::string_view, int, std::vector<std::string>*) override { return result; }
  Status Broadcast(std::string*, int) override { return result; }
  Status Barrier() override { return result; }
};

TEST(AgreeOnStatus, ExchangeFailureIsReturnedAsIs) {
  FakeComm comm;
  comm.result = IOError("link down");
  EXPECT_EQ(AgreeOnStatus(comm, NotFoundError("x")).ToString(), "IOError: link down");
}

// Each rank sends one byte, 0 for OK, else its code and message: an unknown
// code byte or an empty message from a peer is an error, never success.
TEST(AgreeOnStatus, UnknownCodeByteIsAnError) {
  FakeComm comm;
  comm.gathered = {std::string(1, '\0'), "\x63junk", ""};
  Status s = AgreeOnStatus(comm, OkStatus());
  EXPECT_EQ(s.code(), StatusCode::kInternal);
  EXPECT_EQ(s.message(), "rank 1: junk (unknown status code 99)");
  comm.gathered = {std::string(1, '\0'), "", "\x63junk"};
  s = AgreeOnStatus(comm, OkStatus());
  EXPECT_EQ(s.code(), StatusCode::kInternal);
  EXPECT_EQ(s.message(), "rank 1: empty status message");
}

}  // namespace
}  // namespace shardpoint
