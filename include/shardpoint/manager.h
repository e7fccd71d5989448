// CheckpointManager: a directory of checkpoints, one per training iteration.
//
//   <root>/iter_0000100/     a checkpoint (complete iff it has a manifest)
//   <root>/iter_0000200/
//   <root>/latest            the iteration last committed, as decimal text
//   <root>/.lock             the lock of the job writing here (see below)
//
// After a save commits, rank 0 replaces `latest` atomically (write
// latest.tmp, fsync, rename, fsync <root>) and applies retention. A crash
// before that leaves `latest` one save behind, never pointing at an
// incomplete checkpoint. Resume does not trust `latest` alone: it picks the
// newest iteration directory that holds a manifest, so a killed save (data
// files, no manifest) is ignored even when it is the newest directory.
//
// Retention (keep_last = N > 0): after each commit, complete checkpoints
// beyond the newest N are removed, and so are incomplete directories older
// than the newest complete one (leftovers of killed saves). The newest
// complete checkpoint and the one just committed are never removed.
//
// The lock: Open (rank 0) takes <root>/.lock through Storage::LockFile, a
// kernel lock that belongs to the open file and dies with the process that
// holds it, however it dies: a killed or restarted job (same host, same pid
// in a restarted container) never leaves a stale lock behind. A second job's
// Open fails with FailedPrecondition naming the holder ("pid <pid> on host
// '<host>'", as the holder wrote it into the file). Close() or the destructor
// removes the file and releases the lock. Set ManagerOptions::lock = false
// when the scheduler guarantees exclusivity.
//
// Collective methods (Open, Save, SaveAsync, MarkCommitted, Resume) are called
// by every rank with the same arguments; the others are local. Not
// thread-safe; one manager per rank.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "shardpoint/async_save.h"
#include "shardpoint/checkpoint.h"

namespace shardpoint {

// Resources (resources.h), which must outlive the manager: its storage holds
// the root, the tracker and the lock; storage, pool and log are also those of
// every save and load the manager runs whose own options leave them unset.
struct ManagerOptions : Resources {
  // Keep the newest N complete checkpoints. Default 0: keep all.
  int keep_last = 0;
  // Take <root>/.lock (Storage::LockFile). Default true.
  bool lock = true;
};

class CheckpointManager {
 public:
  // Collective. Creates `root` if needed and, on rank 0, takes the lock.
  static Result<std::unique_ptr<CheckpointManager>> Open(const std::string& root, Comm& comm,
                                                         const ManagerOptions& options = {});
  ~CheckpointManager();  // Close()
  // Local: releases the lock now (rank 0). Afterwards Save, SaveAsync and
  // MarkCommitted fail with FailedPrecondition; the local queries still work.
  // Idempotent. REQUIRES: no SaveAsync of this manager in flight.
  Status Close();
  CheckpointManager(const CheckpointManager&) = delete;
  CheckpointManager& operator=(const CheckpointManager&) = delete;

  const std::string& root() const { return root_; }
  // "<root>/iter_0000100". REQUIRES: iteration >= 0.
  std::string PathFor(int64_t iteration) const;
  // Iterations with a complete checkpoint, ascending. Local.
  Result<std::vector<int64_t>> CompleteIterations() const;
  // The newest complete checkpoint's iteration, or nullopt. Local.
  Result<std::optional<int64_t>> LatestComplete() const;
  // What `latest` says, or nullopt if there is no tracker. Local.
  Result<std::optional<int64_t>> Tracker() const;

  // Collective: Save into PathFor(iteration), then MarkCommitted.
  Result<SaveStats> Save(const State& state, int64_t iteration, Comm& comm,
                         const SaveOptions& options = {});
  // Collective: SaveAsync into PathFor(iteration); MarkCommitted runs in the
  // background after the commit (see async_save.h for the Comm rules).
  SaveHandle SaveAsync(AsyncSaver& saver, const State& state, int64_t iteration, Comm& comm,
                       const SaveOptions& options = {});
  // Collective, after the checkpoint of `iteration` committed: rank 0 updates
  // `latest` and applies retention. An error says that the checkpoint itself
  // committed (it is complete, and Resume finds it) and which step failed.
  Status MarkCommitted(int64_t iteration, Comm& comm);
  // Collective: the newest complete checkpoint's iteration as rank 0 sees it
  // (every rank gets the same answer), or nullopt if there is none.
  Result<std::optional<int64_t>> AgreeOnLatest(Comm& comm) const;
  // Collective: loads the newest complete checkpoint (AgreeOnLatest) and
  // returns its iteration; NotFound if there is none.
  Result<int64_t> Resume(State& state, Comm& comm, const LoadOptions& options = {});

 private:
  CheckpointManager(std::string root, const ManagerOptions& options);
  std::string root_;
  ManagerOptions options_;
  Status CheckOpen() const;
  Resources ResolvedResources() const;       // options_ with storage_
  Status ApplyRetention(int64_t iteration);  // rank 0
  Storage* storage_;
  std::unique_ptr<FileLock> lock_;  // rank 0, while open, unless options.lock is false
  bool closed_ = false;
};

}  // namespace shardpoint
