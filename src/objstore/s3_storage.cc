#include "src/objstore/s3_storage.h"

#include <algorithm>
#include <cstring>
#include <future>
#include <mutex>
#include <optional>

#include "src/objstore/s3_upload.h"

namespace shardpoint::internal_objstore {
namespace {

constexpr char kScheme[] = "s3://";

std::string Range(uint64_t offset, uint64_t n) {
  return "[" + std::to_string(offset) + ", " + std::to_string(offset + n) + ")";
}

// "a/b" -> "a/b/"; "" (the bucket's root) stays "".
std::string AsPrefix(std::string key) {
  while (!key.empty() && key.back() == '/') key.pop_back();
  return key.empty() ? key : key + "/";
}

// Writes go straight into their part's buffer (S3Upload's part window), in
// any order and from any number of threads; Sync completes the upload.
// Under a hold (S3Storage::HoldCompletes), Sync sends the parts and hands the
// upload to the storage, which completes or aborts it at the release.
class S3WritableFile : public WritableFile {
 public:
  S3WritableFile(S3Storage* storage, std::string path, std::string bucket, std::string key,
                 std::shared_ptr<PartPool> pool)
      : storage_(storage),
        path_(std::move(path)),
        upload_(std::make_shared<S3Upload>(storage->client(), std::move(bucket), std::move(key),
                                           std::move(pool))) {}

  Status WriteAt(uint64_t offset, const void* data, size_t n) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      SP_RETURN_IF_ERROR(CheckOpen("write"));
    }
    return upload_->WriteAt(offset, data, n);  // copies outside any lock
  }

  // Sets the size the object will have: bytes below it never written are
  // zeros, sent at Sync (writes may still come below it, in any order).
  Status Truncate(uint64_t size) override {
    std::lock_guard<std::mutex> lock(mu_);
    SP_RETURN_IF_ERROR(CheckOpen("truncate"));
    const uint64_t written = upload_->size();
    if (size < written) {
      return InvalidArgumentError("truncate " + path_ + " to " + std::to_string(size) +
                                  " bytes: an object can only be extended (" +
                                  std::to_string(written) + " bytes written)");
    }
    upload_->ExtendTo(size);
    return OkStatus();
  }

  // Completes the upload: the object now exists, whole. Under a hold: every
  // part sent, the complete left to the release.
  Status Sync() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_) return OkStatus();
    SP_RETURN_IF_ERROR(CheckOpen("sync"));
    finished_ = true;
    if (!storage_->Holding(path_)) return upload_->Finish();
    Status sent = upload_->SendParts();
    if (!sent.ok()) {
      finished_ = false;  // Close aborts it
      return sent;
    }
    return storage_->Hold(path_, upload_);
  }

  // Without Sync the object is abandoned (a POSIX file would be there
  // unsynced; an unfinished upload is nothing).
  Status Close() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return OkStatus();
    closed_ = true;
    if (!finished_) return upload_->Abort();
    return OkStatus();
  }

  const std::string& path() const override { return path_; }

 private:
  Status CheckOpen(const char* what) const {
    if (closed_ || finished_) {
      return FailedPreconditionError(std::string(what) + " " + path_ + ": the file is " +
                                     (closed_ ? "closed" : "already synced (the object is final)"));
    }
    return OkStatus();
  }

  std::mutex mu_;
  S3Storage* const storage_;
  const std::string path_;
  const std::shared_ptr<S3Upload> upload_;
  bool finished_ = false;
  bool closed_ = false;
};

// Opening costs no request: the size is asked for (one HEAD) only when
// Size() is called, and a ReadAt is one ranged GET whose errors already name
// a missing object (NotFound) or a short one (DataLoss and the range). A
// load reads its tensors by the manifest's offsets, so it makes no HEAD.
class S3ReadableFile : public ReadableFile {
 public:
  S3ReadableFile(S3Client* client, std::string path, std::string bucket, std::string key)
      : client_(client), path_(std::move(path)), bucket_(std::move(bucket)), key_(std::move(key)) {}

  Status ReadAt(uint64_t offset, size_t n, void* dst) const override {
    std::optional<uint64_t> size;
    {
      std::lock_guard<std::mutex> lock(mu_);
      size = size_;
    }
    if (size && (offset > *size || n > *size - offset)) {
      return DataLossError("read " + path_ + " at bytes " + Range(offset, n) + ": the object has " +
                           std::to_string(*size) + " bytes");
    }
    return client_->GetRange(bucket_, key_, offset, n, dst);
  }
  Result<uint64_t> Size() const override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!size_) {
      SP_ASSIGN_OR_RETURN(S3ObjectInfo info, client_->HeadObject(bucket_, key_));
      size_ = info.size;
    }
    return *size_;
  }
  const std::string& path() const override { return path_; }

 private:
  S3Client* const client_;
  const std::string path_, bucket_, key_;
  mutable std::mutex mu_;
  mutable std::optional<uint64_t> size_;
};

}  // namespace

Status ParseS3Path(const std::string& path, std::string* bucket, std::string* key) {
  if (!path.starts_with(kScheme)) {
    return InvalidArgumentError("'" + path + "' is not an object-store path (s3://bucket/key)");
  }
  const std::string rest = path.substr(sizeof(kScheme) - 1);
  const size_t slash = rest.find('/');
  *bucket = rest.substr(0, slash);
  *key = slash == std::string::npos ? "" : rest.substr(slash + 1);
  while (!key->empty() && key->back() == '/') key->pop_back();
  if (bucket->empty()) return InvalidArgumentError("'" + path + "' names no bucket");
  return OkStatus();
}

S3Storage::S3Storage(std::unique_ptr<S3Client> client)
    : client_(std::move(client)),
      parts_(std::make_shared<PartPool>(client_->options().part_size,
                                        client_->options().max_connections)),
      lease_ms_(client_->options().lease_ms) {}
S3Storage::~S3Storage() = default;

void S3Storage::HoldCompletes(const std::string& dir) {
  std::lock_guard<std::mutex> lock(held_mu_);
  ++held_[AsPrefix(dir)].holders;
}

Status S3Storage::ReleaseCompletes(const std::string& dir, bool complete) {
  std::vector<std::shared_ptr<S3Upload>> uploads;
  {
    std::lock_guard<std::mutex> lock(held_mu_);
    auto it = held_.find(AsPrefix(dir));
    if (it == held_.end()) return OkStatus();
    uploads.swap(it->second.uploads);
    if (--it->second.holders <= 0) held_.erase(it);
  }
  // One round trip for all: each complete (or abort) on its own thread.
  std::vector<std::future<Status>> done;
  for (auto& u : uploads) {
    done.push_back(std::async(std::launch::async,
                              [&u, complete] { return complete ? u->Finish() : u->Abort(); }));
  }
  Status first;
  for (auto& d : done) {
    Status s = d.get();
    if (first.ok()) first = s;
  }
  return first;
}

bool S3Storage::Holding(const std::string& path) {
  std::lock_guard<std::mutex> lock(held_mu_);
  for (const auto& [prefix, held] : held_) {
    if (path.starts_with(prefix)) return true;
  }
  return false;
}

Status S3Storage::Hold(const std::string& path, std::shared_ptr<S3Upload> upload) {
  std::lock_guard<std::mutex> lock(held_mu_);
  for (auto& [prefix, held] : held_) {
    if (!path.starts_with(prefix)) continue;
    held.uploads.push_back(std::move(upload));
    return OkStatus();
  }
  return FailedPreconditionError("sync " + path + ": the hold on its directory ended");
}

Result<std::unique_ptr<WritableFile>> S3Storage::NewWritableFile(const std::string& path,
                                                                 const WriteFileOptions&) {
  std::string bucket, key;
  SP_RETURN_IF_ERROR(ParseS3Path(path, &bucket, &key));
  if (key.empty()) return InvalidArgumentError("'" + path + "' names a bucket, not an object");
  return std::unique_ptr<WritableFile>(new S3WritableFile(this, path, bucket, key, parts_));
}

Result<std::unique_ptr<ReadableFile>> S3Storage::NewReadableFile(const std::string& path) {
  std::string bucket, key;
  SP_RETURN_IF_ERROR(ParseS3Path(path, &bucket, &key));
  if (key.empty()) return InvalidArgumentError("'" + path + "' names a bucket, not an object");
  return std::unique_ptr<ReadableFile>(new S3ReadableFile(client_.get(), path, bucket, key));
}

Result<std::optional<std::string>> S3Storage::ReadWholeFile(const std::string& path) {
  std::string bucket, key;
  SP_RETURN_IF_ERROR(ParseS3Path(path, &bucket, &key));
  if (key.empty()) return InvalidArgumentError("'" + path + "' names a bucket, not an object");
  Result<std::string> data = client_->GetObject(bucket, key);
  if (data.ok()) return std::optional<std::string>(std::move(*data));
  if (data.status().code() == StatusCode::kNotFound) return std::optional<std::string>();
  return data.status();
}

Status S3Storage::CreateDirs(const std::string& path) {
  std::string bucket, key;
  return ParseS3Path(path, &bucket, &key);
}

Status S3Storage::SyncDir(const std::string&) { return OkStatus(); }  // nothing to make durable

Status S3Storage::Rename(const std::string& from, const std::string& to) {
  return FailedPreconditionError("rename " + from + " to " + to + ": object stores have no rename");
}

Status S3Storage::RemoveFile(const std::string& path) {
  std::string bucket, key;
  SP_RETURN_IF_ERROR(ParseS3Path(path, &bucket, &key));
  return client_->DeleteObject(bucket, key);
}

Status S3Storage::RemoveAll(const std::string& path) {
  std::string bucket, key;
  SP_RETURN_IF_ERROR(ParseS3Path(path, &bucket, &key));
  if (key.empty()) return InvalidArgumentError("refusing to remove all of bucket " + bucket);
  SP_ASSIGN_OR_RETURN(S3Listing listing, client_->List(bucket, AsPrefix(key)));
  for (const S3ObjectInfo& o : listing.objects) {
    SP_RETURN_IF_ERROR(client_->DeleteObject(bucket, o.key));
  }
  return client_->DeleteObject(bucket, key);
}

Result<uint64_t> S3Storage::AbortAbandonedWrites(const std::string& dir, const Which& which) {
  std::string bucket, key;
  SP_RETURN_IF_ERROR(ParseS3Path(dir, &bucket, &key));
  const std::string prefix = AsPrefix(key);
  // A checkpoint at a bucket's root: every upload of the bucket would be
  // under it, other writers' too. Left alone.
  if (prefix.empty()) return uint64_t{0};
  SP_ASSIGN_OR_RETURN(std::vector<S3OpenUpload> open,
                      client_->ListMultipartUploads(bucket, prefix));
  Status first;
  uint64_t aborted = 0;
  for (const S3OpenUpload& u : open) {
    if (which && !which(u.key.substr(prefix.size()))) continue;
    Status s = client_->AbortMultipartUpload(bucket, u.key, u.upload_id);  // gone: OK
    if (!s.ok() && first.ok()) first = s;
    aborted += s.ok();
  }
  if (!first.ok()) return first;
  return aborted;
}

Result<bool> S3Storage::Exists(const std::string& path) {
  std::string bucket, key;
  SP_RETURN_IF_ERROR(ParseS3Path(path, &bucket, &key));
  if (!key.empty()) {
    Result<S3ObjectInfo> head = client_->HeadObject(bucket, key);
    if (head.ok()) return true;
    if (head.status().code() != StatusCode::kNotFound) return head.status();
  }
  return IsDirectory(path);
}

Result<bool> S3Storage::IsDirectory(const std::string& path) {
  std::string bucket, key;
  SP_RETURN_IF_ERROR(ParseS3Path(path, &bucket, &key));
  SP_ASSIGN_OR_RETURN(S3Listing listing, client_->List(bucket, AsPrefix(key), "/", 1));
  return !listing.objects.empty() || !listing.common_prefixes.empty();
}

Result<std::vector<std::string>> S3Storage::ListDir(const std::string& path) {
  std::string bucket, key;
  SP_RETURN_IF_ERROR(ParseS3Path(path, &bucket, &key));
  const std::string prefix = AsPrefix(key);
  SP_ASSIGN_OR_RETURN(S3Listing listing, client_->List(bucket, prefix, "/"));
  std::vector<std::string> names;
  for (const S3ObjectInfo& o : listing.objects) names.push_back(o.key.substr(prefix.size()));
  for (const std::string& p : listing.common_prefixes) {
    names.push_back(p.substr(prefix.size(), p.size() - prefix.size() - 1));
  }
  // An empty listing is an empty directory: prefixes exist implicitly.
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  return names;
}

Status S3Storage::CommitFile(const std::string& path, const std::string& data, bool exclusive) {
  std::string bucket, key;
  SP_RETURN_IF_ERROR(ParseS3Path(path, &bucket, &key));
  return client_->PutObject(bucket, key, data, exclusive);
}

}  // namespace shardpoint::internal_objstore
