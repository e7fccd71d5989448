// S3Storage::LockFile: a lease on an object store.
//
// Taking it: create the lock object with a conditional PUT (If-None-Match:
// *) holding "pid <pid> host <host> expires <unix ms>". If it exists and its
// expiry has passed (its holder crashed, or lost the network), delete it and
// try the conditional create once more; else FailedPrecondition naming the
// holder. While held, a thread renews the expiry every lease/3 (a plain PUT).
// Destroying the lock stops the renewal (the lease then expires by itself);
// UnlockFile deletes the object.
//
// Limits (docs/object-store.md): a crashed holder blocks the next job for up
// to one lease; a holder cut off from the store for longer than a lease may
// lose it while still running; two takers of the same expired lease can
// both delete it, but only one of their conditional creates succeeds. The
// clocks of the hosts must agree to well within a lease.
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "src/objstore/s3_storage.h"

namespace shardpoint::internal_objstore {
namespace {

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string LeaseBody(int lease_ms) {
  char host[256] = {0};
  ::gethostname(host, sizeof(host) - 1);
  return "pid " + std::to_string(::getpid()) + " host " + host + " expires " +
         std::to_string(NowMs() + lease_ms) + "\n";
}

int64_t ExpiryOf(const std::string& body) {
  const size_t at = body.find("expires ");
  return at == std::string::npos ? 0 : std::atoll(body.c_str() + at + 8);
}

class S3Lease : public FileLock {
 public:
  S3Lease(S3Client* client, std::string path, std::string bucket, std::string key, int lease_ms)
      : client_(client),
        path_(std::move(path)),
        bucket_(std::move(bucket)),
        key_(std::move(key)),
        lease_ms_(lease_ms),
        renewer_([this] { Renew(); }) {}
  ~S3Lease() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    renewer_.join();
  }
  const std::string& path() const override { return path_; }
  const std::string& bucket() const { return bucket_; }
  const std::string& key() const { return key_; }

 private:
  void Renew() {
    std::unique_lock<std::mutex> lock(mu_);
    while (
        !cv_.wait_for(lock, std::chrono::milliseconds(lease_ms_ / 3), [this] { return stop_; })) {
      // A failed renewal is retried at the next tick; the lease lasts until then.
      client_->PutObject(bucket_, key_, LeaseBody(lease_ms_)).IgnoreError();
    }
  }

  S3Client* const client_;
  const std::string path_, bucket_, key_;
  const int lease_ms_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread renewer_;  // last: starts once the rest is set
};

}  // namespace

Result<std::unique_ptr<FileLock>> S3Storage::LockFile(const std::string& path) {
  std::string bucket, key;
  SP_RETURN_IF_ERROR(ParseS3Path(path, &bucket, &key));
  for (int attempt = 0;; ++attempt) {
    Status created = client_->PutObject(bucket, key, LeaseBody(lease_ms_), true);
    if (created.ok()) {
      return std::unique_ptr<FileLock>(new S3Lease(client_.get(), path, bucket, key, lease_ms_));
    }
    if (created.code() != StatusCode::kFailedPrecondition) return created;
    Result<std::string> holder = client_->GetObject(bucket, key);
    if (!holder.ok()) {
      if (holder.status().code() == StatusCode::kNotFound && attempt == 0) continue;  // released
      return holder.status();
    }
    std::string who = *holder;
    while (!who.empty() && who.back() == '\n') who.pop_back();
    const int64_t expiry = ExpiryOf(*holder);
    if (expiry > NowMs() || attempt > 0) {
      return FailedPreconditionError("lock " + path + " is held (" + who + ", " +
                                     std::to_string(std::max<int64_t>(0, expiry - NowMs())) +
                                     " ms left of its lease)");
    }
    SP_RETURN_IF_ERROR(client_->DeleteObject(bucket, key));  // expired: take it over
  }
}

Status S3Storage::UnlockFile(std::unique_ptr<FileLock> lock) {
  auto* lease = dynamic_cast<S3Lease*>(lock.get());
  if (lease == nullptr) return InvalidArgumentError("UnlockFile: not a lock of this storage");
  const std::string bucket = lease->bucket(), key = lease->key();
  lock.reset();  // stops the renewal first, so it cannot recreate the object
  return client_->DeleteObject(bucket, key);
}

}  // namespace shardpoint::internal_objstore
