#include "src/local/node_storage.h"

#include <utility>

namespace shardpoint::internal_local {
namespace {

// A file whose Sync does nothing: memory is the tier.
class NoSyncFile : public WritableFileWrapper {
 public:
  using WritableFileWrapper::WritableFileWrapper;
  Status Sync() override { return OkStatus(); }
};

}  // namespace

RootedStorage::RootedStorage(Storage* base, std::string root)
    : StorageWrapper(base), root_(std::move(root)) {
  while (root_.size() > 1 && root_.back() == '/') root_.pop_back();
}

std::string RootedStorage::Map(const std::string& path) const {
  if (path.empty() || path == "/") return root_;
  return path.front() == '/' ? root_ + path : root_ + "/" + path;
}

Result<std::unique_ptr<WritableFile>> RootedStorage::NewWritableFile(
    const std::string& path, const WriteFileOptions& options) {
  SP_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> f, base()->NewWritableFile(Map(path), options));
  return std::unique_ptr<WritableFile>(new NoSyncFile(std::move(f)));
}
Result<std::unique_ptr<ReadableFile>> RootedStorage::NewReadableFile(const std::string& path) {
  return base()->NewReadableFile(Map(path));
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
