// Checks MakeMpiComm under mpirun (np 1..N). A standalone gtest program with
// its own main (MPI_Init/MPI_Finalize); every rank runs every test, and the
// exit code is non-zero if any rank failed. Not named *_test.cc on purpose:
// the unit-test glob must not pick it up.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "shardpoint/comm.h"
#include "shardpoint/mpi_comm.h"  // also <mpi.h>, without its C++ bindings
#include "tests/mpi/mpi_test_main.h"

namespace shardpoint {
namespace {

std::string Payload(int rank, int round, size_t size) {
  std::string s(size, '\0');
  for (size_t i = 0; i < size; ++i) s[i] = static_cast<char>(rank * 131 + round * 7 + i * 13);
  if (size >= 2 * sizeof(int)) {
    std::memcpy(s.data(), &rank, sizeof(int));
    std::memcpy(s.data() + sizeof(int), &round, sizeof(int));
  }
  return s;
}

const size_t kSizes[] = {0, 1, 7, 8, 100, 4096, 1 << 20};

class MpiCommTest : public ::testing::Test {
 protected:
  void SetUp() override {
    comm_ = MakeMpiComm(MPI_COMM_WORLD);
    ASSERT_NE(comm_, nullptr);
    int rank = -1, size = -1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    ASSERT_EQ(comm_->rank(), rank);
    ASSERT_EQ(comm_->size(), size);
  }
  std::unique_ptr<Comm> comm_;
};

TEST_F(MpiCommTest, AllGather) {
  const int n = comm_->size();
  for (size_t size : kSizes) {
    std::vector<std::string> all = {"stale"};
    ASSERT_TRUE(comm_->AllGather(Payload(comm_->rank(), 0, size), &all).ok());
    ASSERT_EQ(all.size(), static_cast<size_t>(n));
    for (int r = 0; r < n; ++r) EXPECT_EQ(all[r], Payload(r, 0, size)) << "size " << size;
  }
  // Sizes that differ by rank, including empty ones.
  std::vector<std::string> all;
  ASSERT_TRUE(comm_->AllGather(Payload(comm_->rank(), 1, comm_->rank() * 1000), &all).ok());
  for (int r = 0; r < n; ++r) EXPECT_EQ(all[r], Payload(r, 1, r * 1000));
}

TEST_F(MpiCommTest, AllToAll) {
  const int n = comm_->size(), me = comm_->rank();
  std::vector<std::string> send(n), recv = {"stale"};
  for (int to = 0; to < n; ++to) send[to] = Payload(me * 16 + to, 2, (me + 2 * to) % 5 * 1000);
  ASSERT_TRUE(comm_->AllToAll(send, &recv).ok());
  ASSERT_EQ(recv.size(), static_cast<size_t>(n));
  for (int from = 0; from < n; ++from) {
    EXPECT_EQ(recv[from], Payload(from * 16 + me, 2, (from + 2 * me) % 5 * 1000));
  }
  // A rank with the wrong payload count fails every rank, without a hang.
  std::vector<std::string> wrong(me == 0 ? n + 1 : n);
  Status s = comm_->AllToAll(wrong, &recv);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
}

TEST_F(MpiCommTest, Gather) {
  const int n = comm_->size();
  for (int root = 0; root < n; ++root) {
    for (size_t size : kSizes) {
      std::vector<std::string> all = {"untouched"};
      ASSERT_TRUE(comm_->Gather(Payload(comm_->rank(), root, size), root, &all).ok());
      if (comm_->rank() != root) {
        EXPECT_EQ(all, std::vector<std::string>{"untouched"});
        continue;
      }
      ASSERT_EQ(all.size(), static_cast<size_t>(n));
      for (int r = 0; r < n; ++r) EXPECT_EQ(all[r], Payload(r, root, size));
    }
  }
}

TEST_F(MpiCommTest, Broadcast) {
  for (int root = 0; root < comm_->size(); ++root) {
    for (size_t size : kSizes) {
      std::string data = comm_->rank() == root ? Payload(root, 3, size) : "garbage";
      ASSERT_TRUE(comm_->Broadcast(&data, root).ok());
      EXPECT_EQ(data, Payload(root, 3, size));
    }
  }
}

TEST_F(MpiCommTest, BarrierAndBadRoot) {
  EXPECT_TRUE(comm_->Barrier().ok());
  std::string data;
  EXPECT_EQ(comm_->Broadcast(&data, comm_->size()).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(comm_->Gather("", -1, nullptr).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(comm_->Barrier().ok());
}

TEST_F(MpiCommTest, ManyRoundsNeverMix) {
  const int n = comm_->size();
  for (int round = 0; round < 1000; ++round) {
    const int root = round % n;
    auto size_of = [&](int r) { return 8 + (round * 37 + r) % 64; };
    switch (round % 4) {
      case 0: {
        std::vector<std::string> all;
        ASSERT_TRUE(
            comm_->AllGather(Payload(comm_->rank(), round, size_of(comm_->rank())), &all).ok());
        for (int r = 0; r < n; ++r) ASSERT_EQ(all[r], Payload(r, round, size_of(r)));
        break;
      }
      case 1: {
        std::vector<std::string> all;
        ASSERT_TRUE(
            comm_->Gather(Payload(comm_->rank(), round, size_of(comm_->rank())), root, &all).ok());
        if (comm_->rank() == root) {
          for (int r = 0; r < n; ++r) ASSERT_EQ(all[r], Payload(r, round, size_of(r)));
        }
        break;
      }
      case 2: {
        std::string data = comm_->rank() == root ? Payload(root, round, size_of(root)) : "";
        ASSERT_TRUE(comm_->Broadcast(&data, root).ok());
        ASSERT_EQ(data, Payload(root, round, size_of(root)));
        break;
      }
      case 3:
        ASSERT_TRUE(comm_->Barrier().ok());
        break;
    }
  }
}

TEST_F(MpiCommTest, AgreeOnStatus) {
  const int n = comm_->size();
  EXPECT_TRUE(AgreeOnStatus(*comm_, OkStatus()).ok());
  for (int failing = 0; failing < n; ++failing) {
    // Every rank from `failing` up fails; the lowest one must win everywhere.
    Status local = comm_->rank() >= failing
                       ? Status(StatusCode::kDataLoss, "bad " + std::to_string(comm_->rank()))
                       : OkStatus();
    Status agreed = AgreeOnStatus(*comm_, local);
    EXPECT_EQ(agreed.code(), StatusCode::kDataLoss);
    EXPECT_EQ(agreed.message(),
              "rank " + std::to_string(failing) + ": bad " + std::to_string(failing));
  }
  // Only the last rank fails, with another code.
  Status agreed =
      AgreeOnStatus(*comm_, comm_->rank() == n - 1 ? NotFoundError("gone") : OkStatus());
  EXPECT_EQ(agreed.ToString(), "NotFound: rank " + std::to_string(n - 1) + ": gone");
}

TEST_F(MpiCommTest, IndependentOfWorldTraffic) {
  // The Comm works on a duplicate: a pending message on the world
  // communicator must not be picked up by its collectives.
  const int n = comm_->size();
  if (n < 2) GTEST_SKIP() << "needs 2 ranks";
  MPI_Request request = MPI_REQUEST_NULL;
  int token = 42, received = 0;
  if (comm_->rank() == 0) MPI_Isend(&token, 1, MPI_INT, 1, 0, MPI_COMM_WORLD, &request);
  std::string data = comm_->rank() == 0 ? "bcast" : "";
  ASSERT_TRUE(comm_->Broadcast(&data, 0).ok());
  EXPECT_EQ(data, "bcast");
  if (comm_->rank() == 1) {
    MPI_Recv(&received, 1, MPI_INT, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    EXPECT_EQ(received, 42);
  }
  if (comm_->rank() == 0) MPI_Wait(&request, MPI_STATUS_IGNORE);
}

}  // namespace
}  // namespace shardpoint

int main(int argc, char** argv) {
  return shardpoint::testing::RunMpiTests(argc, argv, "mpi_comm_check");
}
