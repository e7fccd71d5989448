#include "src/comm/thread_comm.h"

#include <cstring>
#include <string>
#include <thread>
#include <utility>

#include "src/comm/transport.h"

namespace shardpoint {
namespace internal_comm {
namespace {

const char* OpName(CollectiveOp op) {
  switch (op) {
    case CollectiveOp::kAllGather:
      return "AllGather";
    case CollectiveOp::kGather:
      return "Gather";
    case CollectiveOp::kBroadcast:
      return "Broadcast";
    case CollectiveOp::kBarrier:
      return "Barrier";
    case CollectiveOp::kAllToAll:
      return "AllToAll";
  }
  return "?";
}

bool HasRoot(CollectiveOp op) {
  return op == CollectiveOp::kGather || op == CollectiveOp::kBroadcast;
}

class ThreadComm final : public Comm, public MemoryTransport, public ViewAllToAll {
 public:
  ThreadComm(std::shared_ptr<ThreadGroup> group, int rank)
      : group_(std::move(group)), rank_(rank) {}
  // A destroyed Comm can never join another collective; say so, so that the
  // other ranks fail instead of waiting for it.
  ~ThreadComm() override { group_->Depart(rank_); }

  int rank() const override { return rank_; }
  int size() const override { return group_->size(); }

  Status AllGather(std::string_view mine, std::vector<std::string>* all) override {
    SP_RETURN_IF_ERROR(group_->Arrive(rank_, CollectiveOp::kAllGather, 0, mine));
    if (all != nullptr) {
      all->resize(size());
      for (int i = 0; i < size(); ++i) (*all)[i].assign(group_->slot(i));
    }
    group_->Leave();
    return all != nullptr ? OkStatus() : InvalidArgumentError("AllGather: null output");
  }

  Status Gather(std::string_view mine, int root, std::vector<std::string>* all) override {
    SP_RETURN_IF_ERROR(CheckRoot(root));
    SP_RETURN_IF_ERROR(group_->Arrive(rank_, CollectiveOp::kGather, root, mine));
    const bool copy = rank_ == root && all != nullptr;
    if (copy) {
      all->resize(size());
      for (int i = 0; i < size(); ++i) (*all)[i].assign(group_->slot(i));
    }
    group_->Leave();
    if (rank_ == root && !copy) return InvalidArgumentError("Gather: null output on root");
    return OkStatus();
  }

  Status Broadcast(std::string* data, int root) override {
    SP_RETURN_IF_ERROR(CheckRoot(root));
    // Still take part on a null `data`, so that the other ranks do not hang.
    std::string_view mine = rank_ == root && data != nullptr ? *data : std::string_view();
    SP_RETURN_IF_ERROR(group_->Arrive(rank_, CollectiveOp::kBroadcast, root, mine));
    if (rank_ != root && data != nullptr) data->assign(group_->slot(root));
    group_->Leave();
    return data != nullptr ? OkStatus() : InvalidArgumentError("Broadcast: null data");
  }

  Status Barrier() override {
    SP_RETURN_IF_ERROR(group_->Arrive(rank_, CollectiveOp::kBarrier, 0, {}));
    group_->Leave();
    return OkStatus();
  }

  Status AllToAll(const std::vector<std::string>& send, std::vector<std::string>* recv) override {
    const bool ok = static_cast<int>(send.size()) == size() && recv != nullptr;
    SP_RETURN_IF_ERROR(group_->Arrive(rank_, CollectiveOp::kAllToAll, 0, {}, ok ? &send : nullptr));
    Status s = PartsStatus();
    if (s.ok()) {
      recv->resize(size());
      for (int r = 0; r < size(); ++r) (*recv)[r].assign(group_->part(r, rank_));
    }
    group_->Leave();
    return s;
  }

  Status AllToAllViews(
      const std::vector<std::string_view>& send,
      const std::function<Status(const std::vector<std::string_view>&)>& use) override {
    const bool ok = static_cast<int>(send.size()) == size();
    SP_RETURN_IF_ERROR(
        group_->Arrive(rank_, CollectiveOp::kAllToAll, 0, {}, nullptr, ok ? &send : nullptr));
    Status s = PartsStatus();
    if (s.ok()) {
      std::vector<std::string_view> recv(size());
      for (int r = 0; r < size(); ++r) recv[r] = group_->part(r, rank_);
      s = use(recv);  // the peers' memory stays valid until Leave
    }
    group_->Leave();
    return s;
  }

  // Each rank's list of pieces travels as the bytes of its string_views
  // (the ranks share one address space), read back on the other side.
  Status AllToAllPieces(
      const std::vector<std::vector<std::string_view>>& send,
      const std::function<Status(const std::vector<std::vector<std::string_view>>&)>& use)
      override {
    std::vector<std::string> lists(send.size());
    for (size_t r = 0; r < send.size(); ++r) {
      if (send[r].empty()) continue;  // no pieces: data() may be null
      lists[r].assign(reinterpret_cast<const char*>(send[r].data()),
                      send[r].size() * sizeof(std::string_view));
    }
    const std::vector<std::string_view> views(lists.begin(), lists.end());
    return AllToAllViews(views, [&](const std::vector<std::string_view>& recv) {
      std::vector<std::vector<std::string_view>> pieces(recv.size());
      for (size_t r = 0; r < recv.size(); ++r) {
        pieces[r].resize(recv[r].size() / sizeof(std::string_view));
        if (pieces[r].empty()) continue;  // data() may be null
        std::memcpy(pieces[r].data(), recv[r].data(), pieces[r].size() * sizeof(std::string_view));
      }
      return use(pieces);
    });
  }

 private:
  Status CheckRoot(int root) const {
    if (root < 0 || root >= size()) {
      return InvalidArgumentError("root " + std::to_string(root) + " out of range for " +
                                  std::to_string(size()) + " ranks");
    }
    return OkStatus();
  }

  // After an AllToAll's Arrive: an error if any rank passed bad arguments.
  Status PartsStatus() const {
    for (int r = 0; r < size(); ++r) {
      if (!group_->has_parts(r)) {
        return InvalidArgumentError("AllToAll: rank " + std::to_string(r) + " passed " +
                                    "bad arguments (one payload per rank and an output)");
      }
    }
    return OkStatus();
  }

  std::shared_ptr<ThreadGroup> group_;
  int rank_;
};

}  // namespace

ThreadGroup::ThreadGroup(int n, std::chrono::milliseconds deadline)
    : n_(n), deadline_(deadline), slots_(n), departed_(n, false) {}

void ThreadGroup::Abort(Status status) {
  std::lock_guard<std::mutex> lock(mu_);
  PoisonLocked(std::move(status));
}

void ThreadGroup::Depart(int rank) {
  std::lock_guard<std::mutex> lock(mu_);
  if (departed_[rank]) return;
  departed_[rank] = true;
  ++num_departed_;
  cv_.notify_all();
}

void ThreadGroup::PoisonLocked(Status status) {
  if (status.ok()) status = InternalError("ThreadGroup aborted with an OK status");
  if (poison_.ok()) poison_ = std::move(status);
  cv_.notify_all();
}

Status ThreadGroup::BrokenLocked() {
  if (!poison_.ok()) return poison_;
  // A departed rank is never inside a round (it left after its last one
  // completed), so a round that is not ready can never complete.
  if (num_departed_ > 0) {
    int r = 0;
    while (!departed_[r]) ++r;
    PoisonLocked(FailedPreconditionError("rank " + std::to_string(r) +
                                         " left the group before collective #" +
                                         std::to_string(round_ + 1)));
    return poison_;
  }
  return OkStatus();
}

Status ThreadGroup::CheckOpsLocked() const {
  const Slot& first = slots_[0];
  for (int r = 1; r < n_; ++r) {
    const Slot& s = slots_[r];
    if (s.op == first.op && (!HasRoot(s.op) || s.root == first.root)) continue;
    auto describe = [](int rank, const Slot& slot) {
      std::string d = "rank " + std::to_string(rank) + " called " + OpName(slot.op);
      if (HasRoot(slot.op)) d += "(root " + std::to_string(slot.root) + ")";
      return d;
    };
    return FailedPreconditionError("collective #" + std::to_string(round_ + 1) +
                                   " mismatch: " + describe(0, first) + ", " + describe(r, s));
  }
  return OkStatus();
}

void ThreadGroup::ExpireLocked(int rank, CollectiveOp op) {
  std::string missing;
  int count = 0;
  for (int r = 0; r < n_; ++r) {
    if (slots_[r].arrived) continue;
    missing += (count++ > 0 ? ", " : "") + std::to_string(r);
  }
  PoisonLocked(DeadlineExceededError(
      "rank " + std::to_string(rank) + ": collective #" + std::to_string(round_ + 1) + " (" +
      OpName(op) + ") did not complete within its deadline of " +
      std::to_string(deadline_.count()) + " ms: rank" + (count > 1 ? "s " : " ") + missing +
      " did not arrive (dead, hung or too slow)"));
}

Status ThreadGroup::Arrive(int rank, CollectiveOp op, int root, std::string_view mine,
                           const std::vector<std::string>* parts,
                           const std::vector<std::string_view>* views) {
  const auto start = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock(mu_);
  SP_RETURN_IF_ERROR(BrokenLocked());
  slots_[rank] = Slot{mine, parts, views, op, root, /*arrived=*/true};
  if (++arrived_ == n_) {
    // Ranks that disagree on the collective would read slots they do not
    // understand; the sequence is broken for good, so poison instead.
    Status mismatch = CheckOpsLocked();
    if (!mismatch.ok()) {
      PoisonLocked(std::move(mismatch));
      return poison_;
    }
    ready_ = true;
    cv_.notify_all();
    return OkStatus();
  }
  auto done = [&] { return ready_ || !poison_.ok() || num_departed_ > 0; };
  if (deadline_.count() <= 0) {
    cv_.wait(lock, done);
  } else if (!cv_.wait_until(lock, start + deadline_, done)) {
    ExpireLocked(rank, op);
  }
  // Once ready, others may be reading our slot: we must see the round through.
  if (ready_) return OkStatus();
  return BrokenLocked();
}

void ThreadGroup::Leave() {
  std::unique_lock<std::mutex> lock(mu_);
  if (++left_ == n_) {
    for (Slot& s : slots_) s.arrived = false;
    arrived_ = 0;
    left_ = 0;
    ready_ = false;
    ++round_;
    cv_.notify_all();
    return;
  }
  // Every rank in the round is alive and only copying, so this cannot hang;
  // poison is ignored here because our slot may still be read.
  const uint64_t my_round = round_;
  cv_.wait(lock, [&] { return round_ != my_round; });
}

std::vector<std::unique_ptr<Comm>> MakeThreadGroupComms(const std::shared_ptr<ThreadGroup>& group) {
  std::vector<std::unique_ptr<Comm>> comms;
  comms.reserve(group->size());
  for (int r = 0; r < group->size(); ++r) comms.push_back(std::make_unique<ThreadComm>(group, r));
  return comms;
}

}  // namespace internal_comm

std::vector<std::unique_ptr<Comm>> MakeThreadComms(int n, std::chrono::milliseconds deadline) {
  if (n < 1) return {};
  return internal_comm::MakeThreadGroupComms(
      std::make_shared<internal_comm::ThreadGroup>(n, deadline));
}

std::vector<Status> RunThreadRanks(int n, const std::function<Status(Comm&)>& fn,
                                   std::chrono::milliseconds deadline) {
  if (n < 1) return {};
  auto group = std::make_shared<internal_comm::ThreadGroup>(n, deadline);
  std::vector<std::unique_ptr<Comm>> comms = internal_comm::MakeThreadGroupComms(group);
  std::vector<Status> statuses(n);
  std::vector<std::thread> threads;
  threads.reserve(n);
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      statuses[r] = fn(*comms[r]);
      // A rank that returns while others still expect it in a collective
      // would hang them; departing makes their collective fail instead.
      group->Depart(r);
    });
  }
  for (std::thread& t : threads) t.join();
  return statuses;
}

}  // namespace shardpoint
