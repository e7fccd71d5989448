// A fixed-size thread pool. Thread-safe. Passed in, never global.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include "shardpoint/status.h"

namespace shardpoint::internal_io {

class ThreadPool {
 public:
  explicit ThreadPool(int num_threads);  // REQUIRES: num_threads >= 1
  ~ThreadPool();                         // runs queued tasks to completion, joins
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return static_cast<int>(threads_.size()); }
  // Queues fn; the future yields its Status.
  std::future<Status> Submit(std::function<Status()> fn);

 private:
  void Loop();
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::packaged_task<Status()>> queue_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

// Runs fn(i) for i in [0, n) on the pool (the caller's thread helps) and
// returns the first error by index, after all tasks have finished. An
// exception thrown by fn(i) is that index's error (StatusFromCurrentException).
Status ParallelFor(ThreadPool* pool, int64_t n, const std::function<Status(int64_t)>& fn);

}  // namespace shardpoint::internal_io
