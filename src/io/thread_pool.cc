#include "src/io/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "src/base/guard.h"

using shardpoint::internal_base::StatusFromCurrentException;

namespace shardpoint {

ThreadPool::ThreadPool(int num_threads) {
  num_threads = std::max(1, num_threads);
  threads_.reserve(num_threads);
  for (int i = 0; i < num_threads; ++i) threads_.emplace_back([this] { Loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

std::future<Status> ThreadPool::Submit(std::function<Status()> fn) {
  std::packaged_task<Status()> task(std::move(fn));
  std::future<Status> result = task.get_future();
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(task));
  }
  cv_.notify_one();
  return result;
}

void ThreadPool::Loop() {
  for (;;) {
    std::packaged_task<Status()> task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      // Drain the queue before stopping: the destructor promises that queued
      // tasks run.
      if (queue_.empty()) return;
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task();
  }
}

bool ThreadPool::InPool() const {
  const std::thread::id me = std::this_thread::get_id();
  for (const std::thread& t : threads_) {
    if (t.get_id() == me) return true;
  }
  return false;
}

}  // namespace shardpoint

namespace shardpoint::internal_io {

namespace {

// State shared by the caller of ParallelFor and its helper tasks. Held by
// shared_ptr because a helper may start after ParallelFor has returned (the
// pool was busy); it then finds no index left and exits without touching fn.
struct ParallelForState {
  ParallelForState(int64_t n, const std::function<Status(int64_t)>* fn) : n(n), fn(fn) {}

  // Claims and runs indices until none are left. Indices are claimed in
  // increasing order, so once an error is seen every index still unclaimed is
  // higher than it and may be skipped without changing the result.
  void Work() {
    for (;;) {
      int64_t i = next.fetch_add(1);
      if (i >= n) return;
      if (!failed.load()) {
        // An exception becomes this index's error: thrown in a helper it
        // would be lost with the dropped future, and `finished` never reach n.
        Status s;
        try {
          s = (*fn)(i);
        } catch (...) {
          s = StatusFromCurrentException("parallel task " + std::to_string(i));
        }
        if (!s.ok()) {
          std::lock_guard<std::mutex> lock(mu);
          if (error_index < 0 || i < error_index) {
            error_index = i;
            error = std::move(s);
          }
          failed.store(true);
        }
      }
      std::lock_guard<std::mutex> lock(mu);
      if (++finished == n) done.notify_all();
    }
  }

  const int64_t n;
  const std::function<Status(int64_t)>* fn;
  std::atomic<int64_t> next{0};
  std::atomic<bool> failed{false};
  std::mutex mu;
  std::condition_variable done;
  int64_t finished = 0;  // guarded by mu
  int64_t error_index = -1;
  Status error;
};

}  // namespace

Status ParallelFor(ThreadPool* pool, int64_t n, const std::function<Status(int64_t)>& fn) {
  if (n <= 0) return OkStatus();
  if (pool == nullptr || n == 1) {
    for (int64_t i = 0; i < n; ++i) {
      try {
        SP_RETURN_IF_ERROR(fn(i));
      } catch (...) {
        return StatusFromCurrentException("parallel task " + std::to_string(i));
      }
    }
    return OkStatus();
  }
  auto state = std::make_shared<ParallelForState>(n, &fn);
  int64_t helpers = std::min<int64_t>(pool->num_threads(), n - 1);
  for (int64_t h = 0; h < helpers; ++h) {
    // The futures are dropped on purpose: waiting for a helper that has not
    // started would deadlock a ParallelFor nested in a pool task. Instead the
    // caller runs whatever the helpers have not claimed, and waits only for
    // indices that are already running.
    pool->Submit([state] {
      state->Work();
      return OkStatus();
    });
  }
  state->Work();
  std::unique_lock<std::mutex> lock(state->mu);
  state->done.wait(lock, [&] { return state->finished == n; });
  return state->error;
}

struct Ahead::State {
  std::function<void()> fn;
  std::mutex mu;
  std::condition_variable done_cv;
  bool claimed = false, done = false;

  // Runs fn unless another thread claimed it first.
  void RunIfUnclaimed() {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (claimed) return;
      claimed = true;
    }
    fn();
    std::lock_guard<std::mutex> lock(mu);
    done = true;
    done_cv.notify_all();
  }
};

Ahead::Ahead(ThreadPool* pool, std::function<void()> fn) : state_(std::make_shared<State>()) {
  state_->fn = std::move(fn);
  if (pool) {
    pool->Submit([state = state_] {
      state->RunIfUnclaimed();
      return OkStatus();
    });
  }
}

Ahead::~Ahead() { Wait(); }

void Ahead::Wait() {
  state_->RunIfUnclaimed();
  std::unique_lock<std::mutex> lock(state_->mu);
  state_->done_cv.wait(lock, [&] { return state_->done; });
}

}  // namespace shardpoint::internal_io
