// The one place where a call's Resources (shardpoint/resources.h) get their
// defaults: every entry point makes a CallResources from its options and
// takes storage, pool and log from it, never from the options directly.
#pragma once

#include <memory>
#include <string>

#include "shardpoint/resources.h"
#include "shardpoint/storage.h"
#include "shardpoint/thread_pool.h"

namespace shardpoint::internal_io {

class CallResources {
 public:
  // `io_threads`: the caller's effective thread count when it differs from
  // r.io_threads (an options struct's deprecated `threads` spelling); 0 =
  // r.io_threads.
  explicit CallResources(const Resources& r, int io_threads = 0);
  CallResources(const CallResources&) = delete;
  CallResources& operator=(const CallResources&) = delete;

  // r.storage, or DefaultStorage().
  Storage* storage() const { return storage_; }
  // The effective io_threads (at least 1).
  int io_threads() const { return io_threads_; }
  // r.pool, or (made on the first call, joined when this object is
  // destroyed) a pool of `threads` threads; `threads` <= 0 means
  // io_threads(). Callers whose own thread works too pass io_threads() - 1.
  ThreadPool* pool(int threads = 0);
  // Passes `line` to r.log; does nothing when it is empty.
  void Log(const std::string& line) const;

 private:
  Storage* storage_;
  ThreadPool* shared_;
  int io_threads_;
  const std::function<void(const std::string&)>* log_;
  std::unique_ptr<ThreadPool> owned_;
};

// Sets to's storage, pool and log that are unset from `from` (a manager's
// resources into the options of a save or load it runs).
void InheritUnset(const Resources& from, Resources* to);

}  // namespace shardpoint::internal_io
