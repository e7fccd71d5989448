// ParallelFor over the public ThreadPool (shardpoint/thread_pool.h), which
// calls get through Resources (src/io/resources.h resolves the defaults).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "shardpoint/status.h"
#include "shardpoint/thread_pool.h"

namespace shardpoint::internal_io {

// Runs fn(i) for i in [0, n) on the pool (the caller's thread helps) and
// returns the first error by index, after all tasks have finished. An
// exception thrown by fn(i) is that index's error (StatusFromCurrentException).
Status ParallelFor(ThreadPool* pool, int64_t n, const std::function<Status(int64_t)>& fn);

// Work started ahead on the pool: fn runs on a pool thread, or on the thread
// that calls Wait() if no pool thread has picked it up by then, so waiting
// never depends on a free pool thread (nor makes a thread). Without a pool,
// Wait() runs it. The destructor waits. fn must not throw.
class Ahead {
 public:
  Ahead(ThreadPool* pool, std::function<void()> fn);
  ~Ahead();
  Ahead(const Ahead&) = delete;
  Ahead& operator=(const Ahead&) = delete;
  void Wait();

 private:
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace shardpoint::internal_io
