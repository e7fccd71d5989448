// Async save: stall training only for a copy into staging memory.
//
// SaveAsync copies every tensor, object, the common blob and the metadata of
// this rank's State into a staging pool owned by an AsyncSaver, starts a
// background thread that runs Save on that copy (write, fsync, commit), and
// returns. The caller may modify or free its tensors as soon as SaveAsync
// returns. The save's outcome comes from SaveHandle::Wait().
//
// Collective: every rank calls SaveAsync in the same order, each with its own
// AsyncSaver. A local failure (say, the staging pool bound) does not fail the
// call: it becomes every rank's error at Wait(), so no rank is left waiting in
// a collective.
//
// At most one save is in flight per AsyncSaver: SaveAsync first waits for the
// previous save to finish (its outcome stays with its handle), then reuses
// the pool. The pool grows to the largest state staged and is kept for the
// next save (bounded by AsyncSaverOptions::max_staging_bytes). Keep one
// AsyncSaver for the process (the Python package does: save_async and
// CheckpointManager.save_async share its default saver), so every save
// shares one pool.
//
// The staging pool: anonymous memory (transparent huge pages on request,
// AsyncSaverOptions::huge_pages). Allocated by the first save that needs
// it, that save's stall also pays for faulting in every page (several times
// a memcpy of the state). Reserve() creates the pool and faults it in ahead
// of the first save, so the first stall is like later ones. A state larger
// than the pool grows it (a new pool, faulted in by that save's copy); a
// state larger than max_staging_bytes fails that save, typed
// (FailedPrecondition on every rank at Wait(), naming both sizes), and
// leaves the pool as it was: no save is ever staged in part.
//
// The Comm: while a save is in flight its background thread uses `comm`; the
// caller must not use that Comm object until Wait() returns (or Done() is
// true). With MPI, the background thread makes MPI calls: MPI must be
// initialized with MPI_THREAD_MULTIPLE if the application makes other MPI
// calls meanwhile (MPI_THREAD_SERIALIZED if it does not). MakeMpiComm
// duplicates its communicator, so shardpoint's messages never mix with the
// application's. Storage, pool, the plan cache and the log hook in
// SaveOptions must outlive the save (a shared pool is used by the background
// save like by any other call).
//
// Thread-safety: an AsyncSaver is used by one thread; a SaveHandle may be
// waited on from any thread. Destroying an AsyncSaver waits for its save.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "shardpoint/checkpoint.h"

namespace shardpoint {
namespace internal_checkpoint {
struct AsyncJob;
struct StagingPool;
}  // namespace internal_checkpoint

struct AsyncSaverOptions {
  // Upper bound on the staging pool, in bytes. A state larger than this fails
  // (at Wait(), on every rank) instead of growing the pool. Default 0: no
  // bound; the pool grows to the largest state staged.
  uint64_t max_staging_bytes = 0;
  // Ask for transparent huge pages for the pool (madvise MADV_HUGEPAGE, where
  // the kernel has it). Off by default: where the kernel compacts memory to
  // find huge pages (THP defrag "madvise", a page cache full of checkpoint
  // files), faulting them in was 5x slower than 4 KiB pages, and copies into
  // the faulted pool were no faster (docs/performance.md#tuning).
  bool huge_pages = false;
};

class SaveHandle {
 public:
  SaveHandle() = default;  // not valid(); Wait() returns FailedPrecondition
  bool valid() const { return job_ != nullptr; }
  // True once the save has committed or failed.
  bool Done() const;
  // Blocks until the save has committed or failed; returns the same result
  // to every call.
  Result<SaveStats> Wait() const;
  // How long SaveAsync blocked the caller (waiting for the previous save,
  // then staging).
  double stall_seconds() const;
  uint64_t staged_bytes() const;
  // Whether this save had to create (or grow) the staging pool: its stall
  // then includes allocating and faulting in the pool's pages.
  bool pool_grew() const;

 private:
  friend class AsyncSaver;
  explicit SaveHandle(std::shared_ptr<internal_checkpoint::AsyncJob> job) : job_(std::move(job)) {}
  std::shared_ptr<internal_checkpoint::AsyncJob> job_;
};

class AsyncSaver {
 public:
  explicit AsyncSaver(AsyncSaverOptions options = {});
  ~AsyncSaver();  // waits for the save in flight
  AsyncSaver(const AsyncSaver&) = delete;
  AsyncSaver& operator=(const AsyncSaver&) = delete;

  // See SaveAsync. `after_commit`, if set, runs in the background thread on
  // every rank once the save has committed (it is collective and may use
  // `comm`; CheckpointManager updates its tracker there); its error becomes
  // the save's error.
  SaveHandle Save(const State& state, const std::string& dir, Comm& comm,
                  const SaveOptions& options = {},
                  std::function<Status(const SaveStats&)> after_commit = nullptr);
  // Waits for the save in flight, if any, and returns its result (OK if none).
  Status WaitForPending();
  // Bytes the staging pool holds now.
  uint64_t pool_bytes() const;
  // Whether the kernel accepted the huge-page request for the pool now held.
  bool pool_huge_pages() const;

  // Creates the staging pool ahead of a save: at least `bytes` (rounded up to
  // 2 MiB), every page faulted in. Waits for the save in flight first. A pool
  // already that large is kept as it is. FailedPrecondition if `bytes`
  // exceeds max_staging_bytes (the pool is left as it was); IOError if the
  // memory cannot be mapped. Local: no Comm, no other rank involved.
  Status Reserve(uint64_t bytes);
  // Reserve(StagingBytes(state)): a pool that `state` (or any state with the
  // same tensor shapes and dtypes) stages into without growing it.
  Status Reserve(const State& state);
  // The pool bytes SaveAsync needs to stage `state`'s tensors (objects and
  // blobs are copied to the heap, not the pool). InvalidArgument as
  // SaveAsync's staging would be for a malformed tensor.
  static Result<uint64_t> StagingBytes(const State& state);

 private:
  AsyncSaverOptions options_;
  std::unique_ptr<internal_checkpoint::StagingPool> pool_;
  std::shared_ptr<internal_checkpoint::AsyncJob> pending_;
  std::thread thread_;
};

// saver.Save(state, dir, comm, options).
inline SaveHandle SaveAsync(AsyncSaver& saver, const State& state, const std::string& dir,
                            Comm& comm, const SaveOptions& options = {}) {
  return saver.Save(state, dir, comm, options);
}

}  // namespace shardpoint
