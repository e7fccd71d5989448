#include "src/local/node_storage.h"

#include <algorithm>
#include <atomic>
#include <utility>

#include "src/io/overwrite_open.h"
#include "src/io/path.h"

namespace shardpoint::internal_local {
namespace {

// A file whose Sync does nothing: memory is the tier.
class NoSyncFile : public WritableFileWrapper {
 public:
  using WritableFileWrapper::WritableFileWrapper;
  Status Sync() override { return OkStatus(); }
};

// A file written over an old one's bytes: truncated on Close to the end of
// what was written (the writers write every byte from 0 on), so nothing of
// the old file is left beyond it.
class OverwrittenFile : public NoSyncFile {
 public:
  using NoSyncFile::NoSyncFile;
  Status WriteAt(uint64_t offset, const void* data, size_t n) override {
    uint64_t end = offset + n, seen = end_.load();
    while (seen < end && !end_.compare_exchange_weak(seen, end)) {
    }
    return NoSyncFile::WriteAt(offset, data, n);
  }
  Status Truncate(uint64_t size) override {
    end_ = size;
    return NoSyncFile::Truncate(size);
  }
  Status Close() override {
    if (!closed_) {
      closed_ = true;
      Status s = NoSyncFile::Truncate(end_.load());
      Status c = NoSyncFile::Close();
      return s.ok() ? c : s;
    }
    return NoSyncFile::Close();
  }

 private:
  std::atomic<uint64_t> end_{0};
  bool closed_ = false;
};

std::string BaseName(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace

RootedStorage::RootedStorage(Storage* base, std::string root)
    : StorageWrapper(base), root_(std::move(root)) {
  while (root_.size() > 1 && root_.back() == '/') root_.pop_back();
}

std::string RootedStorage::Map(const std::string& path) const {
  if (path.empty() || path == "/") return root_;
  return path.front() == '/' ? root_ + path : root_ + "/" + path;
}

void RootedStorage::TakeSpares(std::string spare_dir, std::string data_dir) {
  std::lock_guard<std::mutex> lock(mu_);
  spare_dir_ = std::move(spare_dir);
  data_dir_ = std::move(data_dir);
  spares_.reset();
}

int RootedStorage::spares_taken() const {
  std::lock_guard<std::mutex> lock(mu_);
  return taken_;
}

Result<bool> RootedStorage::TakeSpare(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!spares_) {
    spares_.emplace();
    SP_ASSIGN_OR_RETURN(bool any, base()->IsDirectory(Map(spare_dir_)));
    if (any) {
      SP_ASSIGN_OR_RETURN(*spares_, base()->ListDir(Map(spare_dir_)));
    }
  }
  // The same name first (the same rank's file: likely the same size).
  auto same = std::find(spares_->begin(), spares_->end(), BaseName(path));
  if (same != spares_->end()) std::iter_swap(same, spares_->end() - 1);
  while (!spares_->empty()) {
    const std::string name = std::move(spares_->back());
    spares_->pop_back();
    // Another rank of the node may have taken it (NotFound): the next one.
    Status s = base()->Rename(Map(internal_io::JoinPath(spare_dir_, name)), Map(path));
    if (s.ok()) {
      ++taken_;
      return true;
    }
    if (s.code() != StatusCode::kNotFound) return s;
  }
  return false;
}

Result<std::unique_ptr<WritableFile>> RootedStorage::NewWritableFile(
    const std::string& path, const WriteFileOptions& options) {
  auto* opener = dynamic_cast<internal_io::OverwriteOpener*>(base());
  bool spare = false;
  if (opener != nullptr && !data_dir_.empty() &&
      internal_io::JoinPath(data_dir_, BaseName(path)) == path) {
    SP_ASSIGN_OR_RETURN(spare, TakeSpare(path));
  }
  if (spare) {
    SP_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> f, opener->OpenForOverwrite(Map(path)));
    return std::unique_ptr<WritableFile>(new OverwrittenFile(std::move(f)));
  }
  SP_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> f, base()->NewWritableFile(Map(path), options));
  return std::unique_ptr<WritableFile>(new NoSyncFile(std::move(f)));
}
Result<std::unique_ptr<ReadableFile>> RootedStorage::NewReadableFile(const std::string& path) {
  return base()->NewReadableFile(Map(path));
}

Result<std::unique_ptr<internal_io::MappedFile>> RootedStorage::MapFile(const std::string& path) {
  auto* mapper = dynamic_cast<internal_io::FileMapper*>(base());
  if (mapper == nullptr)
    return FailedPreconditionError("map " + Map(path) + ": storage cannot map");
  return mapper->MapFile(Map(path));
}
Status RootedStorage::CreateDirs(const std::string& path) { return base()->CreateDirs(Map(path)); }
Status RootedStorage::SyncDir(const std::string&) { return OkStatus(); }
Status RootedStorage::Rename(const std::string& from, const std::string& to) {
  return base()->Rename(Map(from), Map(to));
}
Result<bool> RootedStorage::Exchange(const std::string& a, const std::string& b) {
  return base()->Exchange(Map(a), Map(b));
}
Status RootedStorage::RemoveFile(const std::string& path) { return base()->RemoveFile(Map(path)); }
Status RootedStorage::RemoveAll(const std::string& path) { return base()->RemoveAll(Map(path)); }
Result<bool> RootedStorage::Exists(const std::string& path) { return base()->Exists(Map(path)); }
Result<bool> RootedStorage::IsDirectory(const std::string& path) {
  return base()->IsDirectory(Map(path));
}
Result<std::vector<std::string>> RootedStorage::ListDir(const std::string& path) {
  return base()->ListDir(Map(path));
}
Result<std::unique_ptr<FileLock>> RootedStorage::LockFile(const std::string& path) {
  return base()->LockFile(Map(path));
}

}  // namespace shardpoint::internal_local
