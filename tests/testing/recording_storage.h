// A storage that records, for every ReadAt and WriteAt, the calling thread,
// whether it is one of a ThreadPool's threads, and the process's thread
// count at that moment: tests that calls given a shared pool run their I/O
// on it and make no threads of their own.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "shardpoint/status.h"
#include "shardpoint/storage.h"
#include "shardpoint/thread_pool.h"

namespace shardpoint::testing {

// The process's thread count, from /proc/self/status.
inline int ProcessThreads() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("Threads:", 0) == 0) return std::stoi(line.substr(8));
  }
  return -1;
}

// `pool` may be null (then in_pool() stays 0).
class RecordingStorage : public StorageWrapper {
 public:
  RecordingStorage(Storage* base, const ThreadPool* pool) : StorageWrapper(base), pool_(pool) {}

  void Record() {
    const int threads = ProcessThreads();
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++calls_;
      if (pool_ && pool_->InPool()) ++in_pool_;
      ids_.insert(std::this_thread::get_id());
      max_threads_ = std::max(max_threads_, threads);
    }
    const int us = delay_us_.load();
    if (us > 0) std::this_thread::sleep_for(std::chrono::microseconds(us));
  }
  // Every later read and write first waits this long: slow storage, so that a
  // call's pool threads get work however fast the calling thread is.
  void set_call_delay_us(int us) { delay_us_ = us; }
  // Counts the bytes of every later write whose memory starts in [lo, hi).
  void WatchWritesFrom(const void* lo, const void* hi) {
    std::lock_guard<std::mutex> lock(mu_);
    watch_lo_ = static_cast<const char*>(lo);
    watch_hi_ = static_cast<const char*>(hi);
  }
  uint64_t bytes_written_from_watched() {
    std::lock_guard<std::mutex> lock(mu_);
    return from_watched_;
  }
  // Whether a file opened for writing got O_DIRECT.
  bool any_direct() {
    std::lock_guard<std::mutex> lock(mu_);
    return any_direct_;
  }
  int64_t calls() {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_;
  }
  int64_t in_pool() {
    std::lock_guard<std::mutex> lock(mu_);
    return in_pool_;
  }
  int max_threads() {
    std::lock_guard<std::mutex> lock(mu_);
    return max_threads_;
  }
  std::set<std::thread::id> ids() {
    std::lock_guard<std::mutex> lock(mu_);
    return ids_;
  }

  Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path,
                                                        const WriteFileOptions& o) override {
    SP_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> f, StorageWrapper::NewWritableFile(path, o));
    {
      std::lock_guard<std::mutex> lock(mu_);
      any_direct_ = any_direct_ || f->direct();
    }
    return std::unique_ptr<WritableFile>(new Writable(std::move(f), this));
  }
  Result<std::unique_ptr<ReadableFile>> NewReadableFile(const std::string& path) override {
    SP_ASSIGN_OR_RETURN(std::unique_ptr<ReadableFile> f, StorageWrapper::NewReadableFile(path));
    return std::unique_ptr<ReadableFile>(new Readable(std::move(f), this));
  }

 private:
  class Writable : public WritableFileWrapper {
   public:
    Writable(std::unique_ptr<WritableFile> f, RecordingStorage* s)
        : WritableFileWrapper(std::move(f)), s_(s) {}
    Status WriteAt(uint64_t offset, const void* data, size_t n) override {
      s_->Record();
      s_->RecordWrite(static_cast<const char*>(data), n);
      return WritableFileWrapper::WriteAt(offset, data, n);
    }

   private:
    RecordingStorage* s_;
  };
  class Readable : public ReadableFileWrapper {
   public:
    Readable(std::unique_ptr<ReadableFile> f, RecordingStorage* s)
        : ReadableFileWrapper(std::move(f)), s_(s) {}
    Status ReadAt(uint64_t offset, size_t n, void* dst) const override {
      s_->Record();
      return ReadableFileWrapper::ReadAt(offset, n, dst);
    }

   private:
    RecordingStorage* s_;
  };

  void RecordWrite(const char* p, size_t n) {
    std::lock_guard<std::mutex> lock(mu_);
    if (p >= watch_lo_ && p < watch_hi_) from_watched_ += n;
  }

  const ThreadPool* pool_;
  std::atomic<int> delay_us_{0};
  const char* watch_lo_ = nullptr;
  const char* watch_hi_ = nullptr;
  uint64_t from_watched_ = 0;
  bool any_direct_ = false;
  std::mutex mu_;
  int64_t calls_ = 0, in_pool_ = 0;
  int max_threads_ = 0;
  std::set<std::thread::id> ids_;
};

// Runs job(j) for j in [0, n), each on a thread of its own, and returns each
// job's status. `callers` (optional) receives those threads' ids.
inline std::vector<Status> RunJobs(int n, const std::function<Status(int)>& job,
                                   std::set<std::thread::id>* callers = nullptr) {
  std::vector<Status> status(n);
  std::vector<std::thread> threads;
  for (int j = 0; j < n; ++j) threads.emplace_back([&, j] { status[j] = job(j); });
  for (std::thread& t : threads) {
    if (callers) callers->insert(t.get_id());
    t.join();
  }
  return status;
}

}  // namespace shardpoint::testing
