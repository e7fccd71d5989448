// ThreadGroup: the state shared by the Comms of MakeThreadComms (ranks as
// threads of one process). Thread-safe.
//
// A collective is one "round". Each rank deposits a view of its payload in its
// slot (Arrive), waits until all ranks have arrived, reads the slots it needs,
// and then waits until every rank has read (Leave) before returning, so the
// memory behind every slot stays valid while it is read and a round never
// overlaps the next. Slots are read outside the lock: they are written under
// the lock before the round is marked ready and not written again until every
// rank has left, and both transitions are observed under the lock.
//
// A group can be poisoned: Abort(status), a departed rank, ranks calling
// different collectives, or a rank waiting in Arrive past the deadline
// (DeadlineExceeded naming the ranks that had not arrived). Then every
// collective that has not yet become ready returns the poison status, now and
// forever, instead of hanging.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string_view>
#include <vector>

#include "shardpoint/comm.h"
#include "shardpoint/status.h"

namespace shardpoint::internal_comm {

enum class CollectiveOp : uint8_t { kAllGather, kGather, kBroadcast, kBarrier, kAllToAll };

class ThreadGroup {
 public:
  // REQUIRES: n >= 1. `deadline` <= 0: none.
  explicit ThreadGroup(int n, std::chrono::milliseconds deadline = kDefaultCommDeadline);
  ThreadGroup(const ThreadGroup&) = delete;
  ThreadGroup& operator=(const ThreadGroup&) = delete;

  int size() const { return n_; }

  // Poisons the group with `status` (an error); the first poison wins. Ranks
  // waiting in a round that is not yet ready wake up and return it.
  void Abort(Status status);
  // `rank` will call no more collectives. A round that needs it fails with
  // FailedPrecondition("rank R left the group before collective #k") instead
  // of waiting forever. Idempotent.
  void Depart(int rank);

  // Enters the next round with `mine` (which must stay valid until Leave).
  // Returns OK once every rank has arrived with the same op and root; the
  // caller then reads slot(i) and must call Leave(). On error the caller must
  // not call Leave().
  // `parts` or `views` (AllToAll only): one payload per rank, or neither
  // when the caller's arguments were bad (readers then fail).
  Status Arrive(int rank, CollectiveOp op, int root, std::string_view mine,
                const std::vector<std::string>* parts = nullptr,
                const std::vector<std::string_view>* views = nullptr);
  std::string_view slot(int rank) const { return slots_[rank].data; }
  // Whether rank r passed its AllToAll payloads, and its payload to rank `to`.
  bool has_parts(int r) const { return slots_[r].parts || slots_[r].views; }
  std::string_view part(int r, int to) const {
    return slots_[r].parts ? std::string_view((*slots_[r].parts)[to]) : (*slots_[r].views)[to];
  }
  // Waits until every rank has finished reading this round.
  void Leave();

 private:
  struct Slot {
    std::string_view data;
    const std::vector<std::string>* parts = nullptr;
    const std::vector<std::string_view>* views = nullptr;
    CollectiveOp op = CollectiveOp::kBarrier;
    int root = 0;
    bool arrived = false;  // in the current round
  };
  // Sets poison_ (if not yet set) and wakes everyone. REQUIRES: mu_ held.
  void PoisonLocked(Status status);
  // Why the current round can never become ready, or OK. REQUIRES: mu_ held.
  Status BrokenLocked();
  // OK, or the error describing ranks that called different collectives.
  Status CheckOpsLocked() const;
  // Poisons the group with DeadlineExceeded naming the ranks that have not
  // arrived in the current round. REQUIRES: mu_ held.
  void ExpireLocked(int rank, CollectiveOp op);

  const int n_;
  const std::chrono::milliseconds deadline_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Slot> slots_;
  std::vector<bool> departed_;
  int num_departed_ = 0;
  uint64_t round_ = 0;  // rounds completed so far; the current one is #round_+1
  int arrived_ = 0;     // ranks that arrived in the current round
  int left_ = 0;        // ranks that finished reading in the current round
  bool ready_ = false;  // all ranks arrived; slots are readable
  Status poison_;
};

// The thread comms' AllToAll without copies (internal: every Comm of
// MakeThreadComms also derives from this class; a cooperative load finds it
// by dynamic_cast). send[r] goes to rank r. Once every rank has arrived,
// use(recv) runs with recv[r] = rank r's payload to this rank: a view of
// r's memory, valid only during the call (no rank returns, so no rank
// touches its send memory, before every rank's `use` has returned). Returns
// use's status, or the collective's failure (then `use` is not called).
// Ranks may mix it with AllToAll in one collective.
class ViewAllToAll {
 public:
  virtual ~ViewAllToAll() = default;
  virtual Status AllToAllViews(
      const std::vector<std::string_view>& send,
      const std::function<Status(const std::vector<std::string_view>&)>& use) = 0;
  // The same with each payload in pieces, none gathered: send[r] holds the
  // pieces to rank r in order, and use(recv) gets recv[r], rank r's pieces
  // to this rank, views of r's memory under the same rules.
  virtual Status AllToAllPieces(
      const std::vector<std::vector<std::string_view>>& send,
      const std::function<Status(const std::vector<std::vector<std::string_view>>&)>& use) = 0;
};

// The Comms of `group`, comms[i] being rank i. Destroying a Comm departs its
// rank from the group.
std::vector<std::unique_ptr<Comm>> MakeThreadGroupComms(const std::shared_ptr<ThreadGroup>& group);

}  // namespace shardpoint::internal_comm
