// TieredManager: one manager for the two tiers (docs/local-tier.md#the-manager).
//
// A training loop calls Save(state, iteration) every step (or at least at
// every iteration it may checkpoint). The schedule decides what happens:
//
//   * iteration % local_every == 0: a local checkpoint (LocalSave or, with
//     an AsyncSaver, LocalSaveAsync) into the node-local tier, replicated;
//   * iteration % persistent_every == 0: a persistent checkpoint under the
//     manager's root, an ordinary committed checkpoint that
//     CheckpointManager, Load and the CLI read like any other. With `drain`
//     (the default) the manager takes the local checkpoint of that
//     iteration and copies it to the root in a background thread per rank,
//     at most drain_bytes_per_second per rank, each block checked against
//     its checksum as it is read; once every rank's copy is durable, rank 0
//     commits it with the ordinary commit (the manifest through
//     Storage::CommitFile: POSIX or s3:// roots alike) and updates `latest`
//     with the persistent retention (ManagerOptions::keep_last). Without
//     drain, the persistent checkpoint is a CheckpointManager::Save from
//     the state.
//
// The drain threads use no Comm: the agreement that every rank's copy is
// done, and the commit, happen in the next collective call of the manager
// that finds them done (Save at a checkpoint iteration, Flush, Resume), so
// the training thread keeps the Comm to itself. At most one drain is in
// flight; a persistent iteration due while one is still copying waits for it.
//
// Local retention: after each local checkpoint the first rank of each node
// removes the node's committed local checkpoints beyond the newest
// keep_local (never the one draining), and the leftovers of killed local
// saves older than the newest committed one.
//
// Resume loads the newest checkpoint that is complete in either tier: the
// newest local iteration every file of which has a committed copy on some
// node of the job (LatestLocal), recovered with LocalLoad (bytes no survivor
// holds come from the persistent checkpoint of the same iteration when there
// is one), or the newest complete persistent checkpoint when it is newer. A
// local recovery that fails with DataLoss (every copy of some bytes lost or
// corrupted, and no persistent copy) falls back to the newest persistent
// checkpoint.
//
// Every method except the accessors is collective: all ranks call it with
// the same arguments. One manager per rank; not thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "shardpoint/local_tier.h"
#include "shardpoint/manager.h"

namespace shardpoint {

namespace internal_local {
struct Drain;
struct Topology;
}  // namespace internal_local

struct TieredOptions {
  // The persistent tier: keep_last, lock and its Resources (storage, pool,
  // log), as for CheckpointManager.
  ManagerOptions persistent;
  // The local tier (local_root, node_id, replicas, round_bytes).
  LocalTierOptions local;
  // A local checkpoint at iterations divisible by this (0: none).
  int64_t local_every = 1;
  // A persistent checkpoint at iterations divisible by this (0: none).
  int64_t persistent_every = 0;
  // Persistent checkpoints are drained from the local checkpoint of the same
  // iteration (taken then even off the local schedule) in the background.
  // False: saved from the state, synchronously, by CheckpointManager::Save.
  bool drain = true;
  // Bytes per second each rank's drain writes at most (0: no bound).
  uint64_t drain_bytes_per_second = 0;
  // Committed local checkpoints kept per node (at least 1).
  int keep_local = 2;
};

// What a Save did.
struct TieredStep {
  bool local = false;                // a local checkpoint was taken (or started, async)
  bool persistent = false;           // a persistent one was saved or its drain started
  std::optional<int64_t> committed;  // a drain that finished in this call: its iteration
  SaveHandle handle;                 // with an AsyncSaver: the local save in flight
};

// What Resume loaded.
struct TieredResume {
  int64_t iteration = 0;
  bool from_local = false;  // local tier (LocalLoad) or persistent (Load)
  LoadResult load;          // bytes_local / bytes_peer / bytes_persistent
};

class TieredManager {
 public:
  // Collective: opens the persistent root (CheckpointManager::Open) and
  // learns the nodes. InvalidArgument for a negative schedule or
  // keep_local < 1.
  static Result<std::unique_ptr<TieredManager>> Open(const std::string& root, Comm& comm,
                                                     const TieredOptions& options = {});
  ~TieredManager();  // joins a drain in flight without committing it
  TieredManager(const TieredManager&) = delete;
  TieredManager& operator=(const TieredManager&) = delete;

  CheckpointManager& persistent() { return *persistent_; }
  const TieredOptions& options() const { return options_; }
  // The iteration draining now, if any (local).
  std::optional<int64_t> draining() const;

  // Collective: checkpoints `iteration` as the schedule says (nothing, and
  // no communication, when neither tier is due). At a due iteration it first
  // waits for the async local save in flight, then commits the drain in
  // flight if every rank's copy is done. With `saver`, the local save runs
  // in its background thread (the Comm rules of async_save.h: the caller
  // leaves `comm` alone until the next call of the manager or the handle's
  // Wait). An error of an earlier async save or drain is returned here (the
  // local checkpoints stay).
  Result<TieredStep> Save(const State& state, int64_t iteration, Comm& comm,
                          AsyncSaver* saver = nullptr);
  // Collective: waits for the local save and the drain in flight and
  // commits the drain. Returns the drained iteration, if any.
  Result<std::optional<int64_t>> Flush(Comm& comm);
  // Collective: loads the newest checkpoint complete in either tier (waits
  // for any drain first). std::nullopt when neither tier has one (nothing
  // loaded, the state untouched): a fresh start, not an error.
  Result<std::optional<TieredResume>> Resume(State& state, Comm& comm,
                                             const LoadOptions& load = {});

 private:
  TieredManager(const TieredOptions& options, std::unique_ptr<CheckpointManager> persistent);
  Status StartDrain(int64_t iteration, Comm& comm);
  Result<std::optional<int64_t>> FinishDrain(Comm& comm, bool wait);
  Status RetainLocal(Comm& comm);
  Status Settle(Comm& comm);  // the async local save: wait, retain, start its drain

  TieredOptions options_;
  std::unique_ptr<CheckpointManager> persistent_;
  std::unique_ptr<internal_local::Topology> topology_;
  std::unique_ptr<internal_local::Drain> drain_;
  SaveHandle pending_;                  // the async local save in flight
  std::optional<int64_t> drain_after_;  // drain this once pending_ is done
};

}  // namespace shardpoint
