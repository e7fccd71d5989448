// ThreadPool: worker threads that shardpoint calls share.
//
// Every entry point that works in parallel (Save, Load, LoadFromHf, the
// AsyncSaver's saves, VerifyCheckpoint, DiffCheckpoints, ExportHf and the
// conversions, the CheckpointManager's saves and loads) takes a pool through
// Resources::pool (resources.h). Without one, each call makes a pool of
// Resources::io_threads threads and joins it before returning; with one, the
// call runs its parallel work on the pool's threads (and its own) and creates
// no thread. One pool may be passed to any number of calls, also to calls
// running at the same time on different threads: the pool's size then bounds
// the I/O threads of all of them together.
//
// Thread-safe. The pool must outlive every call it is passed to; destroying
// it runs the tasks still queued, then joins its threads.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include "shardpoint/status.h"

namespace shardpoint {

class ThreadPool {
 public:
  // Starts max(1, num_threads) threads.
  explicit ThreadPool(int num_threads);
  ~ThreadPool();  // runs queued tasks to completion, joins
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return static_cast<int>(threads_.size()); }
  // Queues fn; the future yields its Status.
  std::future<Status> Submit(std::function<Status()> fn);
  // True when called on one of this pool's threads.
  bool InPool() const;

 private:
  void Loop();
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::packaged_task<Status()>> queue_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace shardpoint
