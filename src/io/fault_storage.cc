#include "src/io/fault_storage.h"

#include <utility>

namespace shardpoint::internal_io {
namespace {

std::string Range(uint64_t offset, uint64_t n) {
  return "[" + std::to_string(offset) + ", " + std::to_string(offset + n) + ")";
}

// Counts one call and says whether it is at or past the configured failure
// point (0 = never).
bool CountAndCheck(std::atomic<int64_t>* count, const std::atomic<int64_t>& fail_from) {
  int64_t call = count->fetch_add(1) + 1;
  int64_t from = fail_from.load();
  return from > 0 && call >= from;
}

}  // namespace

// Forwards to the base file; a failing WriteAt writes nothing, like a disk
// that is full.
class FaultWritableFile : public WritableFileWrapper {
 public:
  FaultWritableFile(FaultStorage* owner, std::unique_ptr<WritableFile> base)
      : WritableFileWrapper(std::move(base)), owner_(owner) {}

  Status WriteAt(uint64_t offset, const void* data, size_t n) override {
    if (CountAndCheck(&owner_->writes_, owner_->fail_write_from_)) {
      return IOError("write " + path() + " at bytes " + Range(offset, n) +
                     ": No space left on device (injected)");
    }
    return WritableFileWrapper::WriteAt(offset, data, n);
  }
  Status Reserve(uint64_t size) override {
    if (owner_->fail_reserve_.load()) {
      return IOError("reserve " + std::to_string(size) + " bytes for " + path() +
                     ": No space left on device (injected)");
    }
    return WritableFileWrapper::Reserve(size);
  }
  Status Sync() override {
    if (owner_->fail_sync_.load())
      return IOError("fsync " + path() + ": Input/output error (injected)");
    return WritableFileWrapper::Sync();
  }

 private:
  FaultStorage* const owner_;
};

class FaultReadableFile : public ReadableFileWrapper {
 public:
  FaultReadableFile(FaultStorage* owner, std::unique_ptr<ReadableFile> base)
      : ReadableFileWrapper(std::move(base)), owner_(owner) {}

  Status ReadAt(uint64_t offset, size_t n, void* dst) const override {
    if (CountAndCheck(&owner_->reads_, owner_->fail_read_from_)) {
      return IOError("read " + path() + " at bytes " + Range(offset, n) +
                     ": Input/output error (injected)");
    }
    return ReadableFileWrapper::ReadAt(offset, n, dst);
  }

 private:
  FaultStorage* const owner_;
};

void FaultStorage::FailRenameTo(const std::string& suffix) {
  std::lock_guard<std::mutex> lock(mu_);
  fail_rename_suffix_ = suffix;
}

Result<std::unique_ptr<WritableFile>> FaultStorage::NewWritableFile(
    const std::string& path, const WriteFileOptions& options) {
  SP_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> file,
                      StorageWrapper::NewWritableFile(path, options));
  return std::unique_ptr<WritableFile>(new FaultWritableFile(this, std::move(file)));
}

Result<std::unique_ptr<ReadableFile>> FaultStorage::NewReadableFile(const std::string& path) {
  SP_ASSIGN_OR_RETURN(std::unique_ptr<ReadableFile> file, StorageWrapper::NewReadableFile(path));
  return std::unique_ptr<ReadableFile>(new FaultReadableFile(this, std::move(file)));
}

Status FaultStorage::Rename(const std::string& from, const std::string& to) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    const std::string& suffix = fail_rename_suffix_;
    if (!suffix.empty() && to.size() >= suffix.size() &&
        to.compare(to.size() - suffix.size(), suffix.size(), suffix) == 0) {
      return IOError("rename " + from + " to " + to + ": Input/output error (injected)");
    }
  }
  return StorageWrapper::Rename(from, to);
}

Result<bool> FaultStorage::Exchange(const std::string& a, const std::string& b) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    const std::string& suffix = fail_rename_suffix_;
    for (const std::string* p : {&a, &b}) {
      if (!suffix.empty() && p->size() >= suffix.size() &&
          p->compare(p->size() - suffix.size(), suffix.size(), suffix) == 0) {
        return IOError("exchange " + a + " and " + b + ": Input/output error (injected)");
      }
    }
  }
  return StorageWrapper::Exchange(a, b);
}

}  // namespace shardpoint::internal_io
