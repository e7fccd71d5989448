#include "src/comm/shm_exchange.h"

#include <dirent.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <vector>

namespace shardpoint::internal_comm {
namespace {

constexpr int kRanks = 4;

class ShmExchangeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (std::string* d : {&dir_, &other_dir_}) {
      std::string t = ::testing::TempDir() + "/shm_exchange_XXXXXX";
      ASSERT_NE(mkdtemp(t.data()), nullptr);
      *d = t;
    }
  }
  void TearDown() override {
    // Every segment is unlinked once set up: nothing is left behind.
    EXPECT_EQ(Entries(dir_), 0) << dir_;
    EXPECT_EQ(Entries(other_dir_), 0) << other_dir_;
    rmdir(dir_.c_str());
    rmdir(other_dir_.c_str());
  }
  static int Entries(const std::string& dir) {
    int n = 0;
    DIR* d = opendir(dir.c_str());
    if (d == nullptr) return -1;
    while (dirent* e = readdir(d)) n += e->d_name[0] != '.';
    closedir(d);
    return n;
  }
  // Nodes a (ranks 0, 1) and b (ranks 2, 3): hybrid.
  ShmOptions Options(int rank) const {
    ShmOptions o;
    o.node_id = rank < 2 ? "a" : "b";
    o.dir = dir_;
    o.same_process = true;
    o.max_half = 64 << 10;
    return o;
  }
  std::string dir_, other_dir_;
};

// Seeded payload of rank `from` to rank `to` in exchange `k`, from byte 1:
// sizes from empty to past a segment half (64 KiB): those go inline.
std::string Payload(int k, int from, int to) {
  std::mt19937_64 rng(static_cast<uint64_t>(1000 * k + 10 * from + to));
  const size_t size = (k + from + to) % 5 == 0 ? 0 : rng() % (80 << 10);
  std::string s(1 + size, '?');
  for (size_t i = 1; i < s.size(); ++i) s[i] = static_cast<char>(rng());
  return s;
}

// `exchanges` exchanges of Payload()s; checks what each rank received.
Status Exchanges(Comm& comm, ShmExchange& ex, int exchanges) {
  std::vector<std::string> send(kRanks), recv;
  for (int k = 0; k < exchanges; ++k) {
    for (int to = 0; to < kRanks; ++to) send[to] = Payload(k, comm.rank(), to);
    // Odd exchanges take the payloads in place (views), even ones copied.
    Status unpack;
    std::vector<std::string_view> views;
    SP_RETURN_IF_ERROR(
        ex.AllToAllAgreed(comm, OkStatus(), &send, &recv, &unpack, k % 2 ? &views : nullptr));
    SP_RETURN_IF_ERROR(unpack);
    for (int from = 0; from < kRanks; ++from) {
      std::string want = Payload(k, from, comm.rank());
      want[0] = '\0';
      if ((k % 2 ? std::string(views[from]) : recv[from]) != want) {
        return InternalError("exchange " + std::to_string(k) + ": rank " +
                             std::to_string(comm.rank()) + " got wrong bytes from " +
                             std::to_string(from));
      }
    }
  }
  return OkStatus();
}

TEST_F(ShmExchangeTest, SameNodeBytesMoveThroughSharedMemoryOthersThroughTheComm) {
  std::vector<int> peers(kRanks, -1);
  std::vector<uint64_t> through(kRanks, 0);
  std::vector<Status> st = RunThreadRanks(kRanks, [&](Comm& comm) -> Status {
    SP_ASSIGN_OR_RETURN(auto ex, ShmExchange::Open(comm, std::vector<uint64_t>(kRanks, 96 << 10),
                                                   Options(comm.rank())));
    peers[comm.rank()] = ex->shm_peers();
    SP_RETURN_IF_ERROR(Exchanges(comm, *ex, 5));
    through[comm.rank()] = ex->bytes_through_shm();
    return OkStatus();
  });
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_TRUE(st[r].ok()) << st[r].ToString();
    EXPECT_EQ(peers[r], 1);  // its node's other rank
    EXPECT_GT(through[r], 0u);
  }
}

TEST_F(ShmExchangeTest, OneRanksFailureIsEveryRanksError) {
  std::vector<Status> st = RunThreadRanks(kRanks, [&](Comm& comm) -> Status {
    SP_ASSIGN_OR_RETURN(auto ex, ShmExchange::Open(comm, std::vector<uint64_t>(kRanks, 4096),
                                                   Options(comm.rank())));
    if (ex->shm_peers() != 1) return InternalError("no shared memory");
    SP_RETURN_IF_ERROR(Exchanges(comm, *ex, 1));
    std::vector<std::string> send(kRanks, std::string(100, '?')), recv;
    const Status local = comm.rank() == 1 ? DataLossError("checksum mismatch") : OkStatus();
    Status unpack;
    return ex->AllToAllAgreed(comm, local, &send, &recv, &unpack);
  });
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(st[r].ToString(), "DataLoss: rank 1: checksum mismatch") << r;
  }
}

TEST_F(ShmExchangeTest, FallsBackToTheCommWhereAPeerCannotOpenTheSegments) {
  // Rank 3 looks in another directory (another mount namespace's /dev/shm):
  // it cannot open rank 2's segment, so no rank uses shared memory.
  std::vector<int> peers(kRanks, -1);
  std::vector<Status> st = RunThreadRanks(kRanks, [&](Comm& comm) -> Status {
    ShmOptions o = Options(comm.rank());
    if (comm.rank() == 3) o.dir = other_dir_;
    SP_ASSIGN_OR_RETURN(auto ex,
                        ShmExchange::Open(comm, std::vector<uint64_t>(kRanks, 96 << 10), o));
    peers[comm.rank()] = ex->shm_peers();
    SP_RETURN_IF_ERROR(Exchanges(comm, *ex, 3));
    if (ex->bytes_through_shm() != 0) return InternalError("used shared memory");
    return OkStatus();
  });
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_TRUE(st[r].ok()) << st[r].ToString();
    EXPECT_EQ(peers[r], 0);
  }
}

TEST_F(ShmExchangeTest, FallsBackWhereTheDirectoryIsMissing) {
  std::vector<int> peers(kRanks, -1);
  std::vector<Status> st = RunThreadRanks(kRanks, [&](Comm& comm) -> Status {
    ShmOptions o = Options(comm.rank());
    o.dir = dir_ + "/missing";
    SP_ASSIGN_OR_RETURN(auto ex, ShmExchange::Open(comm, std::vector<uint64_t>(kRanks, 4096), o));
    peers[comm.rank()] = ex->shm_peers();
    return Exchanges(comm, *ex, 2);
  });
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_TRUE(st[r].ok()) << st[r].ToString();
    EXPECT_EQ(peers[r], 0);
  }
}

TEST_F(ShmExchangeTest, RanksOfOneProcessShareMemoryAlready) {
  std::vector<int> peers(kRanks, -1);
  std::vector<Status> st = RunThreadRanks(kRanks, [&](Comm& comm) -> Status {
    ShmOptions o = Options(comm.rank());
    o.same_process = false;
    SP_ASSIGN_OR_RETURN(auto ex, ShmExchange::Open(comm, std::vector<uint64_t>(kRanks, 4096), o));
    peers[comm.rank()] = ex->shm_peers();
    return Exchanges(comm, *ex, 1);
  });
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_TRUE(st[r].ok()) << st[r].ToString();
    EXPECT_EQ(peers[r], 0);
  }
}

}  // namespace
}  // namespace shardpoint::internal_comm
