#include "src/objstore/s3_storage.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>

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

// Writes arrive in offset order give or take those in flight; the early ones
// wait in `pending_` until the gap before them fills.
class S3WritableFile : public WritableFile {
 public:
  S3WritableFile(S3Client* client, std::string path, std::string bucket, std::string key)
      : path_(std::move(path)), upload_(client, std::move(bucket), std::move(key)) {}

  Status WriteAt(uint64_t offset, const void* data, size_t n) override {
    std::lock_guard<std::mutex> lock(mu_);
    SP_RETURN_IF_ERROR(CheckOpen("write"));
    if (offset < upload_.size()) {
      return InvalidArgumentError("write " + path_ + " at bytes " + Range(offset, n) +
                                  ": an object is written in order, and byte " +
                                  std::to_string(upload_.size()) + " was already sent");
    }
    if (offset > upload_.size()) {
      Pending& held = pending_[offset];
      held.n = n;
      if (n <= upload_.part_size()) {  // in a recycled part buffer: no fresh pages
        held.pooled = upload_.TakeBuffer();
        std::memcpy(held.pooled.get(), data, n);
      } else {
        held.big.assign(static_cast<const char*>(data), n);
      }
      return OkStatus();
    }
    SP_RETURN_IF_ERROR(upload_.Append(data, n));
    return Drain();
  }

  // Sets the size the object will have: bytes below it never written are
  // zeros, sent at Sync (writes may still come below it, in any order).
  Status Truncate(uint64_t size) override {
    std::lock_guard<std::mutex> lock(mu_);
    SP_RETURN_IF_ERROR(CheckOpen("truncate"));
    uint64_t written = upload_.size();
    if (!pending_.empty()) {
      written = std::max<uint64_t>(written, pending_.rbegin()->first + pending_.rbegin()->second.n);
    }
    if (size < written) {
      return InvalidArgumentError("truncate " + path_ + " to " + std::to_string(size) +
                                  " bytes: an object can only be extended (" +
                                  std::to_string(written) + " bytes written)");
    }
    size_ = size;
    return OkStatus();
  }

  // Completes the upload: the object now exists, whole.
  Status Sync() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_) return OkStatus();
    SP_RETURN_IF_ERROR(CheckOpen("sync"));
    // Holes below the size Truncate set are zeros; others were never written.
    while (!pending_.empty()) {
      const uint64_t next = pending_.begin()->first;
      if (next > size_) {
        return InvalidArgumentError("sync " + path_ + ": bytes from " +
                                    std::to_string(upload_.size()) + " to " + std::to_string(next) +
                                    " were never written");
      }
      SP_RETURN_IF_ERROR(AppendZeros(next));
      SP_RETURN_IF_ERROR(Drain());
    }
    SP_RETURN_IF_ERROR(AppendZeros(size_));
    finished_ = true;
    return upload_.Finish();
  }

  // Without Sync the object is abandoned (a POSIX file would be there
  // unsynced; an unfinished upload is nothing).
  Status Close() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return OkStatus();
    closed_ = true;
    if (!finished_) return upload_.Abort();
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

  Status AppendZeros(uint64_t to) {
    if (upload_.size() >= to) return OkStatus();
    const std::string zeros(std::min<uint64_t>(to - upload_.size(), 1 << 20), '\0');
    while (upload_.size() < to) {
      SP_RETURN_IF_ERROR(
          upload_.Append(zeros.data(), std::min<uint64_t>(zeros.size(), to - upload_.size())));
    }
    return OkStatus();
  }

  Status Drain() {
    while (!pending_.empty() && pending_.begin()->first <= upload_.size()) {
      auto it = pending_.begin();
      Pending& held = it->second;
      if (it->first < upload_.size()) {
        return InvalidArgumentError("write " + path_ + " at bytes " + Range(it->first, held.n) +
                                    " overlaps an earlier one");
      }
      SP_RETURN_IF_ERROR(upload_.Append(held.pooled ? held.pooled.get() : held.big.data(), held.n));
      upload_.GiveBuffer(std::move(held.pooled));
      pending_.erase(it);
    }
    return OkStatus();
  }

  std::mutex mu_;
  const std::string path_;
  S3Upload upload_;
  // A write that came early, held until the bytes before it are sent.
  struct Pending {
    std::unique_ptr<char[]> pooled;  // one of the upload's part buffers
    std::string big;                 // longer than a part
    size_t n = 0;
  };
  std::map<uint64_t, Pending> pending_;
  uint64_t size_ = 0;  // set by Truncate: the object's size at least
  bool finished_ = false;
  bool closed_ = false;
};

class S3ReadableFile : public ReadableFile {
 public:
  S3ReadableFile(S3Client* client, std::string path, std::string bucket, std::string key,
                 uint64_t size)
      : client_(client),
        path_(std::move(path)),
        bucket_(std::move(bucket)),
        key_(std::move(key)),
        size_(size) {}

  Status ReadAt(uint64_t offset, size_t n, void* dst) const override {
    if (offset > size_ || n > size_ - offset) {
      return DataLossError("read " + path_ + " at bytes " + Range(offset, n) + ": the object has " +
                           std::to_string(size_) + " bytes");
    }
    return client_->GetRange(bucket_, key_, offset, n, dst);
  }
  Result<uint64_t> Size() const override { return size_; }
  const std::string& path() const override { return path_; }

 private:
  S3Client* const client_;
  const std::string path_, bucket_, key_;
  const uint64_t size_;
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
    : client_(std::move(client)), lease_ms_(client_->options().lease_ms) {}
S3Storage::~S3Storage() = default;

Result<std::unique_ptr<WritableFile>> S3Storage::NewWritableFile(const std::string& path,
                                                                 const WriteFileOptions&) {
  std::string bucket, key;
  SP_RETURN_IF_ERROR(ParseS3Path(path, &bucket, &key));
  if (key.empty()) return InvalidArgumentError("'" + path + "' names a bucket, not an object");
  return std::unique_ptr<WritableFile>(new S3WritableFile(client_.get(), path, bucket, key));
}

Result<std::unique_ptr<ReadableFile>> S3Storage::NewReadableFile(const std::string& path) {
  std::string bucket, key;
  SP_RETURN_IF_ERROR(ParseS3Path(path, &bucket, &key));
  SP_ASSIGN_OR_RETURN(S3ObjectInfo info, client_->HeadObject(bucket, key));
  return std::unique_ptr<ReadableFile>(
      new S3ReadableFile(client_.get(), path, bucket, key, info.size));
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
