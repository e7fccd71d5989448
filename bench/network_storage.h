// A network-filesystem model for the benchmarks: a Storage wrapper that gives
// every read and write request (and every Sync) a fixed latency and every
// client (one wrapper instance) a bandwidth cap, like one client of NFS or a
// parallel filesystem. Requests from several threads of one client overlap
// their latencies but share its bandwidth (one link, served in order). It
// also counts requests and bytes. The real I/O still goes to the wrapped
// storage, started at once; the call returns when both the real I/O and the
// modelled request are done, so a local disk faster than the model is hidden
// and a slower one shows.
//
// Reads go through the client's cache (a node's page cache, as an NFS client
// keeps one; unbounded): a read or a read-ahead hint (Prefetch, which an NFS
// client turns into READs at once on posix_fadvise(WILLNEED)) sends one
// request for the bytes the cache neither holds nor awaits, and a read waits
// until all its bytes have arrived. So ranks of one node that read the same
// bytes fetch them once, and a read that a hint announced waits only for the
// hint's request. ForgetCache() is the model's drop_caches.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "shardpoint/storage.h"

namespace shardpoint::bench {

class NetworkStorage : public StorageWrapper {
 public:
  // latency_s per request; bytes_per_s for this client (0: no cap). Other
  // calls (directories, renames, locks) pass through unmodelled.
  NetworkStorage(Storage* base, double latency_s, double bytes_per_s)
      : StorageWrapper(base), latency_(latency_s), bw_(bytes_per_s) {}

  // read_requests / read_bytes: ReadAt calls and their bytes; fetch_*: the
  // model's requests for reads and hints (bytes not yet in the client cache).
  std::atomic<uint64_t> read_requests{0}, read_bytes{0}, write_requests{0}, write_bytes{0};
  std::atomic<uint64_t> fetch_requests{0}, fetch_bytes{0};

  using Clock = std::chrono::steady_clock;

  // When the model's request of n bytes, issued now, completes: the link
  // carries it after the requests before it, then the latency.
  Clock::time_point Issue(uint64_t n) {
    std::lock_guard<std::mutex> lock(mu_);
    const Clock::time_point start = std::max(Clock::now(), link_free_);
    link_free_ = start + std::chrono::duration_cast<Clock::duration>(
                             std::chrono::duration<double>(bw_ > 0 ? n / bw_ : 0.0));
    return link_free_ +
           std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(latency_));
  }

  // Bytes [offset, offset + n) of `path` into the client cache: one request
  // for those it neither holds nor awaits. Returns when all have arrived.
  Clock::time_point Fetch(const std::string& path, uint64_t offset, uint64_t n) {
    std::lock_guard<std::mutex> lock(cache_mu_);
    std::map<uint64_t, Arrival>& file = cache_[path];
    const uint64_t end = offset + n;
    Clock::time_point ready{};
    std::vector<std::pair<uint64_t, uint64_t>> missing;
    uint64_t at = offset;
    auto it = file.upper_bound(offset);
    if (it != file.begin()) --it;
    for (; it != file.end() && it->first < end; ++it) {
      if (it->second.end <= at) continue;
      if (it->first > at) missing.push_back({at, it->first});
      ready = std::max(ready, it->second.at);
      at = it->second.end;
    }
    if (at < end) missing.push_back({at, end});
    if (missing.empty()) return ready;
    uint64_t bytes = 0;
    for (const auto& [a, b] : missing) bytes += b - a;
    fetch_requests.fetch_add(1);
    fetch_bytes.fetch_add(bytes);
    const Clock::time_point arrives = Issue(bytes);
    for (const auto& [a, b] : missing) file[a] = Arrival{b, arrives};
    return std::max(ready, arrives);
  }

  // The model's drop_caches: every later read fetches again.
  void ForgetCache() {
    std::lock_guard<std::mutex> lock(cache_mu_);
    cache_.clear();
  }

  Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& p,
                                                        const WriteFileOptions& o) override {
    SP_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> f, base()->NewWritableFile(p, o));
    return std::unique_ptr<WritableFile>(new Writable(std::move(f), this));
  }
  Result<std::unique_ptr<ReadableFile>> NewReadableFile(const std::string& p) override {
    SP_ASSIGN_OR_RETURN(std::unique_ptr<ReadableFile> f, base()->NewReadableFile(p));
    return std::unique_ptr<ReadableFile>(new Readable(std::move(f), this));
  }

 private:
  class Readable : public ReadableFile {
   public:
    Readable(std::unique_ptr<ReadableFile> f, NetworkStorage* s) : f_(std::move(f)), s_(s) {}
    Status ReadAt(uint64_t offset, size_t n, void* dst) const override {
      s_->read_requests.fetch_add(1);
      s_->read_bytes.fetch_add(n);
      const Clock::time_point done = s_->Fetch(f_->path(), offset, n);
      Status st = f_->ReadAt(offset, n, dst);
      std::this_thread::sleep_until(done);
      return st;
    }
    Result<uint64_t> Size() const override { return f_->Size(); }
    const std::string& path() const override { return f_->path(); }
    // The hint reaches the real storage and sends the model's request at once.
    void Prefetch(uint64_t offset, size_t n) const override {
      s_->Fetch(f_->path(), offset, n);
      f_->Prefetch(offset, n);
    }

   private:
    std::unique_ptr<ReadableFile> f_;
    NetworkStorage* s_;
  };
  class Writable : public WritableFile {
   public:
    Writable(std::unique_ptr<WritableFile> f, NetworkStorage* s) : f_(std::move(f)), s_(s) {}
    Status WriteAt(uint64_t offset, const void* data, size_t n) override {
      s_->write_requests.fetch_add(1);
      s_->write_bytes.fetch_add(n);
      const Clock::time_point done = s_->Issue(n);
      Status st = f_->WriteAt(offset, data, n);
      std::this_thread::sleep_until(done);
      return st;
    }
    Status Truncate(uint64_t size) override { return f_->Truncate(size); }
    Status Reserve(uint64_t size) override { return f_->Reserve(size); }
    Status Sync() override {
      const Clock::time_point done = s_->Issue(0);
      Status st = f_->Sync();
      std::this_thread::sleep_until(done);
      return st;
    }
    Status Close() override { return f_->Close(); }
    bool direct() const override { return f_->direct(); }
    size_t alignment() const override { return f_->alignment(); }
    const std::string& path() const override { return f_->path(); }

   private:
    std::unique_ptr<WritableFile> f_;
    NetworkStorage* s_;
  };

  struct Arrival {
    uint64_t end;          // of the range that starts at the key
    Clock::time_point at;  // when its bytes are in the client cache
  };

  const double latency_, bw_;
  std::mutex mu_;
  std::chrono::steady_clock::time_point link_free_{};
  std::mutex cache_mu_;                                       // taken before mu_
  std::map<std::string, std::map<uint64_t, Arrival>> cache_;  // per path: disjoint ranges
};

}  // namespace shardpoint::bench
