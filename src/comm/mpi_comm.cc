// Comm over MPI. Compiled only with SHARDPOINT_HAVE_MPI, so that the library
// builds where MPI is absent.
//
// Every collective is started nonblocking (MPI-3's MPI_I*) and polled against
// the Comm's deadline, since a blocking MPI collective waits forever for a
// rank that died where the launcher lets the others run on (Open MPI's
// `mpirun --enable-recovery`, MPICH's `-disable-auto-cleanup`). By default
// Open MPI 4's mpirun kills the whole job as soon as one rank dies, and
// neither this nor anything else in the survivors runs
// (tests/mpi/rank_killed_check.cc shows both). MPI does not say which rank
// is missing from a collective; the deadline error names those on this host
// whose process exited or is stopped (the ranks' pids and hosts are
// exchanged when the Comm is made), and says so where it cannot.
#ifdef SHARDPOINT_HAVE_MPI

#include "shardpoint/mpi_comm.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "src/comm/transport.h"

namespace shardpoint {
namespace internal_comm {
namespace {

// MPI counts are ints; Broadcast goes in chunks, the gathers refuse.
constexpr uint64_t kMaxCount = INT_MAX;
constexpr uint64_t kBroadcastChunk = uint64_t{1} << 30;

Status MpiStatus(int err, const char* what) {
  if (err == MPI_SUCCESS) return OkStatus();
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(err, text, &len) != MPI_SUCCESS) len = 0;
  int error_class = err;
  MPI_Error_class(err, &error_class);
  return IOError(std::string(what) + " failed: " + std::string(text, len) + " (MPI error class " +
                 std::to_string(error_class) + ")");
}

// MPI may reject a null buffer even with a count of zero.
const void* SendPtr(std::string_view s) {
  static const char kEmpty = 0;
  return s.empty() ? &kEmpty : s.data();
}

// The memory a started collective reads and writes, on the heap: when the
// deadline passes first MPI still owns it (a nonblocking collective can be
// neither cancelled nor freed), so the Comm keeps it until the process ends
// instead of freeing it under MPI. The caller's input is copied in for the
// same reason.
struct Buffers {
  std::string send, recv;
  std::vector<uint64_t> u64_send, u64_recv;
  std::vector<int> counts, displs, rcounts, rdispls;
  int int_send = 0, int_recv = 0;
};

using Clock = std::chrono::steady_clock;

// Who a rank is: its host and pid, exchanged when the Comm is made, so that
// a deadline error can name the ranks on this host that exited or stopped
// (MPI itself does not say who is missing).
struct Peer {
  char host[64] = {};
  int64_t pid = 0;
};

Peer Me() {
  Peer p;
  if (::gethostname(p.host, sizeof p.host - 1) != 0) p.host[0] = '\0';
  p.pid = ::getpid();
  return p;
}

// The state letter of process `pid` (/proc/<pid>/stat: "pid (comm) S ..."),
// or 0 if it is gone.
char ProcessState(int64_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const size_t paren = stat.rfind(')');
  if (!f.good() && stat.empty()) return 0;
  return paren != std::string::npos && paren + 2 < stat.size() ? stat[paren + 2] : 0;
}

// "rank R (pid P on this host) exited; ..." for the ranks on this host that
// exited or are stopped, or what MPI cannot tell.
std::string Casualties(const std::vector<Peer>& peers, int me) {
  std::string out;
  for (int r = 0; r < static_cast<int>(peers.size()); ++r) {
    if (r == me || std::strncmp(peers[r].host, peers[me].host, sizeof Peer::host) != 0) continue;
    const char state = ProcessState(peers[r].pid);
    const char* what = state == 0 || state == 'Z' || state == 'X' ? "exited"
                       : state == 'T' || state == 't'             ? "is stopped"
                                                                  : nullptr;
    if (what == nullptr) continue;
    out += (out.empty() ? "" : "; ") + std::string("rank ") + std::to_string(r) + " (pid " +
           std::to_string(peers[r].pid) + " on this host) " + what;
  }
  return out.empty() ? "MPI does not say which rank" : out;
}

class MpiComm final : public Comm, public MemoryTransport {
 public:
  MpiComm(MPI_Comm comm, int rank, int size, std::chrono::milliseconds deadline,
          std::vector<Peer> peers)
      : comm_(comm), rank_(rank), size_(size), deadline_(deadline), peers_(std::move(peers)) {}
  ~MpiComm() override {
    // Abandoned collectives may still complete into their buffers: leave
    // both them and the communicator be.
    if (!abandoned_.empty()) {
      for (std::unique_ptr<Buffers>& b : abandoned_) (void)b.release();
      return;
    }
    // Freeing after MPI_Finalize is erroneous; then the communicator is gone anyway.
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_free(&comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  Status AllGather(std::string_view mine, std::vector<std::string>* all) override {
    SP_RETURN_IF_ERROR(Begin("AllGather"));
    auto b = std::make_unique<Buffers>();
    SP_RETURN_IF_ERROR(ExchangeSizes(mine.size(), "AllGather", b));
    b->send.assign(mine);
    b->recv.resize(static_cast<size_t>(b->displs.back()) + b->counts.back());
    MPI_Request req;
    SP_RETURN_IF_ERROR(Wait(
        MPI_Iallgatherv(SendPtr(b->send), static_cast<int>(b->send.size()), MPI_BYTE,
                        b->recv.data(), b->counts.data(), b->displs.data(), MPI_BYTE, comm_, &req),
        &req, "MPI_Iallgatherv", b));
    if (all == nullptr) return InvalidArgumentError("AllGather: null output");
    Split(b->recv, b->counts, b->displs, all);
    return OkStatus();
  }

  Status Gather(std::string_view mine, int root, std::vector<std::string>* all) override {
    SP_RETURN_IF_ERROR(CheckRoot(root));
    SP_RETURN_IF_ERROR(Begin("Gather"));
    // Every rank learns every size, so all of them agree on a size error
    // instead of some going on into Gatherv.
    auto b = std::make_unique<Buffers>();
    SP_RETURN_IF_ERROR(ExchangeSizes(mine.size(), "Gather", b));
    b->send.assign(mine);
    if (rank_ == root) b->recv.resize(static_cast<size_t>(b->displs.back()) + b->counts.back());
    MPI_Request req;
    SP_RETURN_IF_ERROR(
        Wait(MPI_Igatherv(SendPtr(b->send), static_cast<int>(b->send.size()), MPI_BYTE,
                          rank_ == root ? b->recv.data() : nullptr, b->counts.data(),
                          b->displs.data(), MPI_BYTE, root, comm_, &req),
             &req, "MPI_Igatherv", b));
    if (rank_ != root) return OkStatus();
    if (all == nullptr) return InvalidArgumentError("Gather: null output on root");
    Split(b->recv, b->counts, b->displs, all);
    return OkStatus();
  }

  Status Broadcast(std::string* data, int root) override {
    SP_RETURN_IF_ERROR(CheckRoot(root));
    SP_RETURN_IF_ERROR(Begin("Broadcast"));
    // Take part even on a null `data`, so peers do not hang.
    auto b = std::make_unique<Buffers>();
    if (rank_ == root && data != nullptr) b->send = *data;
    b->u64_send = {b->send.size()};
    MPI_Request req;
    SP_RETURN_IF_ERROR(Wait(MPI_Ibcast(b->u64_send.data(), 1, MPI_UINT64_T, root, comm_, &req),
                            &req, "MPI_Ibcast (size)", b));
    const uint64_t size = b->u64_send[0];
    if (rank_ != root) b->send.resize(size);
    for (uint64_t pos = 0; pos < size; pos += kBroadcastChunk) {
      const int count = static_cast<int>(std::min(kBroadcastChunk, size - pos));
      SP_RETURN_IF_ERROR(Wait(MPI_Ibcast(b->send.data() + pos, count, MPI_BYTE, root, comm_, &req),
                              &req, "MPI_Ibcast", b));
    }
    if (data == nullptr) return InvalidArgumentError("Broadcast: null data");
    if (rank_ != root) *data = std::move(b->send);
    return OkStatus();
  }

  Status Barrier() override {
    SP_RETURN_IF_ERROR(Begin("Barrier"));
    auto b = std::make_unique<Buffers>();
    MPI_Request req;
    return Wait(MPI_Ibarrier(comm_, &req), &req, "MPI_Ibarrier", b);
  }

  Status AllToAll(const std::vector<std::string>& send, std::vector<std::string>* recv) override {
    SP_RETURN_IF_ERROR(Begin("AllToAll"));
    // Sizes first (every rank learns its incoming sizes), then one Alltoallv.
    // A rank with bad arguments still takes part, sending UINT64_MAX sizes so
    // that every rank fails the same way instead of hanging.
    const bool bad = static_cast<int>(send.size()) != size_ || recv == nullptr;
    auto b = std::make_unique<Buffers>();
    b->u64_send.assign(size_, bad ? UINT64_MAX : 0);
    b->u64_recv.resize(size_);
    for (int r = 0; !bad && r < size_; ++r) b->u64_send[r] = send[r].size();
    MPI_Request req;
    SP_RETURN_IF_ERROR(Wait(MPI_Ialltoall(b->u64_send.data(), 1, MPI_UINT64_T, b->u64_recv.data(),
                                          1, MPI_UINT64_T, comm_, &req),
                            &req, "MPI_Ialltoall (sizes)", b));
    uint64_t out_total = 0, in_total = 0;
    bool any_bad = bad;
    for (int r = 0; r < size_; ++r) {
      any_bad = any_bad || b->u64_recv[r] == UINT64_MAX;
      if (!any_bad) out_total += b->u64_send[r], in_total += b->u64_recv[r];
    }
    b->int_send = any_bad ? 1 : (out_total > kMaxCount || in_total > kMaxCount) ? 2 : 0;
    SP_RETURN_IF_ERROR(
        Wait(MPI_Iallreduce(&b->int_send, &b->int_recv, 1, MPI_INT, MPI_MAX, comm_, &req), &req,
             "MPI_Iallreduce", b));
    if (b->int_recv == 1) {
      return InvalidArgumentError(
          "AllToAll: a rank passed bad arguments (one payload per rank "
          "and an output)");
    }
    if (b->int_recv == 2) {
      return InvalidArgumentError("AllToAll over MPI: a rank sends or receives over " +
                                  std::to_string(kMaxCount) + " bytes; MPI counts are 32-bit");
    }
    b->counts.resize(size_), b->displs.resize(size_);
    b->rcounts.resize(size_), b->rdispls.resize(size_);
    b->recv.resize(in_total);
    b->send.reserve(out_total);
    for (int r = 0, sd = 0, rd = 0; r < size_; ++r) {
      b->counts[r] = static_cast<int>(b->u64_send[r]), b->displs[r] = sd, sd += b->counts[r];
      b->rcounts[r] = static_cast<int>(b->u64_recv[r]), b->rdispls[r] = rd, rd += b->rcounts[r];
      b->send += send[r];
    }
    SP_RETURN_IF_ERROR(Wait(
        MPI_Ialltoallv(b->send.data(), b->counts.data(), b->displs.data(), MPI_BYTE, b->recv.data(),
                       b->rcounts.data(), b->rdispls.data(), MPI_BYTE, comm_, &req),
        &req, "MPI_Ialltoallv", b));
    Split(b->recv, b->rcounts, b->rdispls, recv);
    return OkStatus();
  }

 private:
  Status CheckRoot(int root) const {
    if (root < 0 || root >= size_) {
      return InvalidArgumentError("root " + std::to_string(root) + " out of range for " +
                                  std::to_string(size_) + " ranks");
    }
    return OkStatus();
  }

  // Starts one collective of this Comm: its error at once if the Comm is
  // broken, else its deadline starts now.
  Status Begin(const char* op) {
    if (!broken_.ok()) return broken_;
    ++collectives_;
    op_ = op;
    start_ = Clock::now();
    return OkStatus();
  }

  // Completes the request that `started` (an MPI return code) began, polling
  // it until the current collective's deadline: a short spin (small
  // collectives complete in microseconds), then sleeps growing to 1 ms. Past
  // the deadline the request and `held` are abandoned and the Comm broken.
  Status Wait(int started, MPI_Request* req, const char* what, std::unique_ptr<Buffers>& held) {
    SP_RETURN_IF_ERROR(MpiStatus(started, what));
    const auto spin_until = Clock::now() + std::chrono::microseconds(200);
    auto nap = std::chrono::microseconds(10);
    for (;;) {
      int done = 0;
      SP_RETURN_IF_ERROR(MpiStatus(MPI_Test(req, &done, MPI_STATUS_IGNORE), what));
      if (done) return OkStatus();
      const auto now = Clock::now();
      if (deadline_.count() > 0 && now - start_ >= deadline_) break;
      if (now < spin_until) continue;
      std::this_thread::sleep_for(nap);
      nap = std::min(nap * 2, std::chrono::microseconds(1000));
    }
    abandoned_.push_back(std::move(held));
    broken_ = DeadlineExceededError(
        "rank " + std::to_string(rank_) + ": collective #" + std::to_string(collectives_) + " (" +
        op_ + ", " + what + ") did not complete within its deadline of " +
        std::to_string(deadline_.count()) +
        " ms: a rank did not arrive (dead, hung or too slow): " + Casualties(peers_, rank_) +
        "; this Comm is unusable from now on");
    return broken_;
  }

  // All-gathers the payload sizes into b->u64_recv and lays them out back to
  // back in b->counts and b->displs.
  Status ExchangeSizes(uint64_t my_size, const char* op, std::unique_ptr<Buffers>& b) {
    b->u64_send = {my_size};
    b->u64_recv.resize(size_);
    MPI_Request req;
    SP_RETURN_IF_ERROR(Wait(MPI_Iallgather(b->u64_send.data(), 1, MPI_UINT64_T, b->u64_recv.data(),
                                           1, MPI_UINT64_T, comm_, &req),
                            &req, "MPI_Iallgather (sizes)", b));
    const std::vector<uint64_t>& sizes = b->u64_recv;
    b->counts.resize(size_);
    b->displs.resize(size_);
    uint64_t total = 0;
    for (int r = 0; r < size_; ++r) {
      b->displs[r] = static_cast<int>(total);
      b->counts[r] = static_cast<int>(sizes[r]);
      total += sizes[r];
      if (sizes[r] > kMaxCount || total > kMaxCount) {
        return InvalidArgumentError(std::string(op) + " over MPI: payloads total over " +
                                    std::to_string(kMaxCount) + " bytes (rank " +
                                    std::to_string(r) + " sends " + std::to_string(sizes[r]) +
                                    "); MPI counts are 32-bit");
      }
    }
    return OkStatus();
  }

  void Split(const std::string& buffer, const std::vector<int>& counts,
             const std::vector<int>& displs, std::vector<std::string>* all) const {
    all->resize(size_);
    for (int r = 0; r < size_; ++r) (*all)[r].assign(buffer, displs[r], counts[r]);
  }

  MPI_Comm comm_;
  const int rank_;
  const int size_;
  const std::chrono::milliseconds deadline_;
  const std::vector<Peer> peers_;  // by rank
  uint64_t collectives_ = 0;       // started so far; the current one is #collectives_
  const char* op_ = "";
  Clock::time_point start_;
  Status broken_;  // the deadline error, once one passed
  std::vector<std::unique_ptr<Buffers>> abandoned_;
};

}  // namespace
}  // namespace internal_comm

std::unique_ptr<Comm> MakeMpiComm(MPI_Comm comm, std::chrono::milliseconds deadline) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) return nullptr;
  MPI_Comm dup;
  if (MPI_Comm_dup(comm, &dup) != MPI_SUCCESS) return nullptr;
  int rank = 0, size = 0;
  if (MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN) != MPI_SUCCESS ||
      MPI_Comm_rank(dup, &rank) != MPI_SUCCESS || MPI_Comm_size(dup, &size) != MPI_SUCCESS) {
    MPI_Comm_free(&dup);
    return nullptr;
  }
  const internal_comm::Peer me = internal_comm::Me();
  std::vector<internal_comm::Peer> peers(size);
  if (MPI_Allgather(&me, sizeof me, MPI_BYTE, peers.data(), sizeof me, MPI_BYTE, dup) !=
      MPI_SUCCESS) {
    MPI_Comm_free(&dup);
    return nullptr;
  }
  return std::make_unique<internal_comm::MpiComm>(dup, rank, size, deadline, std::move(peers));
}

}  // namespace shardpoint

#endif  // SHARDPOINT_HAVE_MPI
