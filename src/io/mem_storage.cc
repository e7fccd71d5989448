#include "src/io/mem_storage.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <limits>
#include <map>
#include <set>
#include <unordered_set>
#include <utility>

namespace shardpoint {
namespace internal_io {

// A file or a directory. Directory entries are guarded by MemStorage::mu_;
// file bytes by the node's own mutex, so that file objects, which may outlive
// a rename, a removal or the storage itself, need no access to the storage.
struct MemNode {
  explicit MemNode(bool is_dir) : is_dir(is_dir) {}

  const bool is_dir;
  // Directories: the entries now, and those that survive a crash.
  std::map<std::string, std::shared_ptr<MemNode>> entries;
  std::map<std::string, std::shared_ptr<MemNode>> durable_entries;
  // Files: the bytes now, and those that survive a crash.
  std::mutex mu;
  std::string data;
  std::string synced;
};

// The paths locked now. Shared with the lock objects, which may outlive the
// storage.
struct MemLockTable {
  std::mutex mu;
  std::set<std::string> held;
};

namespace {

class MemFileLock : public FileLock {
 public:
  MemFileLock(std::shared_ptr<MemLockTable> table, std::string path)
      : table_(std::move(table)), path_(std::move(path)) {}
  ~MemFileLock() override {
    std::lock_guard<std::mutex> lock(table_->mu);
    table_->held.erase(path_);
  }
  const std::string& path() const override { return path_; }

 private:
  const std::shared_ptr<MemLockTable> table_;
  const std::string path_;
};

// Mirrors the POSIX messages: "<operation> <path>: <reason>".
Status MemError(StatusCode code, const std::string& context, const char* reason) {
  return Status(code, context + ": " + reason);
}

std::string Range(uint64_t offset, uint64_t n) {
  return "[" + std::to_string(offset) + ", " + std::to_string(offset + n) + ")";
}

struct MemPath {
  std::string text;                // normalized, for messages and path()
  std::vector<std::string> parts;  // components below the root
};

Result<MemPath> ParsePath(const std::string& path) {
  MemPath p;
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = std::min(path.find('/', start), path.size());
    std::string part = path.substr(start, end - start);
    if (part == "..") return InvalidArgumentError("path " + path + ": '..' is not supported");
    if (!part.empty() && part != ".") p.parts.push_back(std::move(part));
    start = end + 1;
  }
  if (!path.empty() && path[0] == '/') p.text = "/";
  for (size_t i = 0; i < p.parts.size(); ++i) p.text += (i > 0 ? "/" : "") + p.parts[i];
  return p;
}

// Walks the first `depth` components of `p` from `root`. The walk must pass
// through directories only; the result is the node reached.
Result<std::shared_ptr<MemNode>> Walk(const std::shared_ptr<MemNode>& root, const MemPath& p,
                                      size_t depth, const std::string& context) {
  std::shared_ptr<MemNode> node = root;
  for (size_t i = 0; i < depth; ++i) {
    if (!node->is_dir) return MemError(StatusCode::kIOError, context, "Not a directory");
    auto it = node->entries.find(p.parts[i]);
    if (it == node->entries.end()) {
      return MemError(StatusCode::kNotFound, context, "No such file or directory");
    }
    node = it->second;
  }
  return node;
}

// The directory holding the last component of `p`.
Result<std::shared_ptr<MemNode>> WalkToParent(const std::shared_ptr<MemNode>& root,
                                              const MemPath& p, const std::string& context) {
  SP_ASSIGN_OR_RETURN(std::shared_ptr<MemNode> parent, Walk(root, p, p.parts.size() - 1, context));
  if (!parent->is_dir) return MemError(StatusCode::kIOError, context, "Not a directory");
  return parent;
}

void Revert(MemNode* node, std::unordered_set<MemNode*>* seen) {
  if (!seen->insert(node).second) return;
  if (!node->is_dir) {
    std::lock_guard<std::mutex> lock(node->mu);
    node->data = node->synced;
    return;
  }
  node->entries = node->durable_entries;
  for (auto& [name, child] : node->entries) Revert(child.get(), seen);
}

class MemWritableFile : public WritableFile {
 public:
  MemWritableFile(std::string path, std::shared_ptr<MemNode> node)
      : path_(std::move(path)), node_(std::move(node)) {}

  Status WriteAt(uint64_t offset, const void* data, size_t n) override {
    SP_RETURN_IF_ERROR(CheckOpen("write"));
    if (offset > std::numeric_limits<size_t>::max() - n) {
      return InvalidArgumentError("write " + path_ + " at offset " + std::to_string(offset) +
                                  ": offset too large");
    }
    std::lock_guard<std::mutex> lock(node_->mu);
    if (offset + n > node_->data.size()) node_->data.resize(offset + n, '\0');
    if (n > 0) std::memcpy(node_->data.data() + offset, data, n);
    return OkStatus();
  }

  Status Truncate(uint64_t size) override {
    SP_RETURN_IF_ERROR(CheckOpen("truncate"));
    std::lock_guard<std::mutex> lock(node_->mu);
    node_->data.resize(size, '\0');
    return OkStatus();
  }

  Status Sync() override {
    SP_RETURN_IF_ERROR(CheckOpen("fsync"));
    std::lock_guard<std::mutex> lock(node_->mu);
    node_->synced = node_->data;
    return OkStatus();
  }

  Status Close() override {
    closed_ = true;
    return OkStatus();
  }

  const std::string& path() const override { return path_; }

 private:
  Status CheckOpen(const char* op) const {
    if (!closed_) return OkStatus();
    return FailedPreconditionError(std::string(op) + " " + path_ + ": file is closed");
  }

  const std::string path_;
  const std::shared_ptr<MemNode> node_;
  std::atomic<bool> closed_{false};
};

class MemReadableFile : public ReadableFile {
 public:
  MemReadableFile(std::string path, std::shared_ptr<MemNode> node)
      : path_(std::move(path)), node_(std::move(node)) {}

  Status ReadAt(uint64_t offset, size_t n, void* dst) const override {
    std::lock_guard<std::mutex> lock(node_->mu);
    uint64_t size = node_->data.size();
    if (offset > size || n > size - offset) {
      return DataLossError("file " + path_ + ": short read at bytes " + Range(offset, n) +
                           ": file has only " + std::to_string(size) + " bytes");
    }
    if (n > 0) std::memcpy(dst, node_->data.data() + offset, n);
    return OkStatus();
  }

  Result<uint64_t> Size() const override {
    std::lock_guard<std::mutex> lock(node_->mu);
    return static_cast<uint64_t>(node_->data.size());
  }

  const std::string& path() const override { return path_; }

 private:
  const std::string path_;
  const std::shared_ptr<MemNode> node_;
};

}  // namespace

MemStorage::MemStorage()
    : root_(std::make_shared<MemNode>(/*is_dir=*/true)), locks_(std::make_shared<MemLockTable>()) {}
MemStorage::~MemStorage() = default;

void MemStorage::SimulateCrash() {
  std::lock_guard<std::mutex> lock(mu_);
  std::unordered_set<MemNode*> seen;
  Revert(root_.get(), &seen);
}

Result<std::unique_ptr<WritableFile>> MemStorage::NewWritableFile(const std::string& path,
                                                                  const WriteFileOptions&) {
  SP_ASSIGN_OR_RETURN(MemPath p, ParsePath(path));
  const std::string context = "open " + p.text + " for writing";
  if (p.parts.empty()) return MemError(StatusCode::kIOError, context, "Is a directory");
  std::lock_guard<std::mutex> lock(mu_);
  SP_ASSIGN_OR_RETURN(std::shared_ptr<MemNode> parent, WalkToParent(root_, p, context));
  std::shared_ptr<MemNode>& node = parent->entries[p.parts.back()];
  if (node == nullptr) {
    node = std::make_shared<MemNode>(/*is_dir=*/false);
  } else if (node->is_dir) {
    return MemError(StatusCode::kIOError, context, "Is a directory");
  } else {
    // O_TRUNC: same node, no bytes; the synced bytes stay until the next Sync.
    std::lock_guard<std::mutex> node_lock(node->mu);
    node->data.clear();
  }
  return std::unique_ptr<WritableFile>(new MemWritableFile(p.text, node));
}

Result<std::unique_ptr<ReadableFile>> MemStorage::NewReadableFile(const std::string& path) {
  SP_ASSIGN_OR_RETURN(MemPath p, ParsePath(path));
  const std::string context = "open " + p.text + " for reading";
  std::lock_guard<std::mutex> lock(mu_);
  SP_ASSIGN_OR_RETURN(std::shared_ptr<MemNode> node, Walk(root_, p, p.parts.size(), context));
  if (node->is_dir) return MemError(StatusCode::kIOError, context, "Is a directory");
  return std::unique_ptr<ReadableFile>(new MemReadableFile(p.text, node));
}

Status MemStorage::CreateDirs(const std::string& path) {
  SP_ASSIGN_OR_RETURN(MemPath p, ParsePath(path));
  std::lock_guard<std::mutex> lock(mu_);
  MemNode* node = root_.get();
  for (const std::string& part : p.parts) {
    std::shared_ptr<MemNode>& child = node->entries[part];
    if (child == nullptr) {
      child = std::make_shared<MemNode>(/*is_dir=*/true);
      node->durable_entries = node->entries;  // as POSIX: the parent fsynced
    }
    if (!child->is_dir) {
      return MemError(StatusCode::kIOError, "create directory " + p.text, "Not a directory");
    }
    node = child.get();
  }
  return OkStatus();
}

Status MemStorage::SyncDir(const std::string& path) {
  SP_ASSIGN_OR_RETURN(MemPath p, ParsePath(path));
  const std::string context = "open directory " + p.text;
  std::lock_guard<std::mutex> lock(mu_);
  SP_ASSIGN_OR_RETURN(std::shared_ptr<MemNode> dir, Walk(root_, p, p.parts.size(), context));
  if (!dir->is_dir) return MemError(StatusCode::kIOError, context, "Not a directory");
  dir->durable_entries = dir->entries;
  return OkStatus();
}

Status MemStorage::Rename(const std::string& from, const std::string& to) {
  SP_ASSIGN_OR_RETURN(MemPath f, ParsePath(from));
  SP_ASSIGN_OR_RETURN(MemPath t, ParsePath(to));
  const std::string context = "rename " + f.text + " to " + t.text;
  if (f.parts.empty() || t.parts.empty()) {
    return MemError(StatusCode::kIOError, context, "Device or resource busy");
  }
  std::lock_guard<std::mutex> lock(mu_);
  SP_ASSIGN_OR_RETURN(std::shared_ptr<MemNode> from_dir, WalkToParent(root_, f, context));
  auto it = from_dir->entries.find(f.parts.back());
  if (it == from_dir->entries.end()) {
    return MemError(StatusCode::kNotFound, context, "No such file or directory");
  }
  std::shared_ptr<MemNode> node = it->second;
  SP_ASSIGN_OR_RETURN(std::shared_ptr<MemNode> to_dir, WalkToParent(root_, t, context));
  if (f.parts == t.parts) return OkStatus();
  if (node->is_dir && t.parts.size() > f.parts.size() &&
      std::equal(f.parts.begin(), f.parts.end(), t.parts.begin())) {
    return MemError(StatusCode::kIOError, context, "Invalid argument");  // into itself
  }
  auto target = to_dir->entries.find(t.parts.back());
  if (target != to_dir->entries.end()) {
    const MemNode& old = *target->second;
    if (node->is_dir && !old.is_dir) {
      return MemError(StatusCode::kIOError, context, "Not a directory");
    }
    if (!node->is_dir && old.is_dir)
      return MemError(StatusCode::kIOError, context, "Is a directory");
    if (old.is_dir && !old.entries.empty()) {
      return MemError(StatusCode::kIOError, context, "Directory not empty");
    }
  }
  to_dir->entries[t.parts.back()] = node;
  from_dir->entries.erase(f.parts.back());
  return OkStatus();
}

Result<bool> MemStorage::Exchange(const std::string& a, const std::string& b) {
  SP_ASSIGN_OR_RETURN(MemPath pa, ParsePath(a));
  SP_ASSIGN_OR_RETURN(MemPath pb, ParsePath(b));
  const std::string context = "exchange " + pa.text + " and " + pb.text;
  if (pa.parts.empty() || pb.parts.empty()) {
    return MemError(StatusCode::kIOError, context, "Device or resource busy");
  }
  std::lock_guard<std::mutex> lock(mu_);
  SP_ASSIGN_OR_RETURN(std::shared_ptr<MemNode> dir_a, WalkToParent(root_, pa, context));
  SP_ASSIGN_OR_RETURN(std::shared_ptr<MemNode> dir_b, WalkToParent(root_, pb, context));
  auto ia = dir_a->entries.find(pa.parts.back());
  auto ib = dir_b->entries.find(pb.parts.back());
  if (ia == dir_a->entries.end() || ib == dir_b->entries.end()) {
    return MemError(StatusCode::kNotFound, context, "No such file or directory");
  }
  std::swap(ia->second, ib->second);
  return true;
}

Status MemStorage::RemoveFile(const std::string& path) {
  SP_ASSIGN_OR_RETURN(MemPath p, ParsePath(path));
  const std::string context = "remove " + p.text;
  if (p.parts.empty()) return MemError(StatusCode::kIOError, context, "Is a directory");
  std::lock_guard<std::mutex> lock(mu_);
  SP_ASSIGN_OR_RETURN(std::shared_ptr<MemNode> dir, WalkToParent(root_, p, context));
  auto it = dir->entries.find(p.parts.back());
  if (it == dir->entries.end()) {
    return MemError(StatusCode::kNotFound, context, "No such file or directory");
  }
  if (it->second->is_dir) return MemError(StatusCode::kIOError, context, "Is a directory");
  dir->entries.erase(it);
  return OkStatus();
}

Status MemStorage::RemoveAll(const std::string& path) {
  SP_ASSIGN_OR_RETURN(MemPath p, ParsePath(path));
  std::lock_guard<std::mutex> lock(mu_);
  if (p.parts.empty()) {
    root_->entries.clear();
    return OkStatus();
  }
  Result<std::shared_ptr<MemNode>> dir = WalkToParent(root_, p, "");
  if (dir.ok()) (*dir)->entries.erase(p.parts.back());
  return OkStatus();  // a path that cannot be reached does not exist
}

Result<bool> MemStorage::Exists(const std::string& path) {
  SP_ASSIGN_OR_RETURN(MemPath p, ParsePath(path));
  std::lock_guard<std::mutex> lock(mu_);
  return Walk(root_, p, p.parts.size(), "").ok();
}

Result<bool> MemStorage::IsDirectory(const std::string& path) {
  SP_ASSIGN_OR_RETURN(MemPath p, ParsePath(path));
  std::lock_guard<std::mutex> lock(mu_);
  Result<std::shared_ptr<MemNode>> node = Walk(root_, p, p.parts.size(), "");
  return node.ok() && (*node)->is_dir;
}

Result<std::vector<std::string>> MemStorage::ListDir(const std::string& path) {
  SP_ASSIGN_OR_RETURN(MemPath p, ParsePath(path));
  const std::string context = "list directory " + p.text;
  std::lock_guard<std::mutex> lock(mu_);
  SP_ASSIGN_OR_RETURN(std::shared_ptr<MemNode> dir, Walk(root_, p, p.parts.size(), context));
  if (!dir->is_dir) return MemError(StatusCode::kIOError, context, "Not a directory");
  std::vector<std::string> names;
  names.reserve(dir->entries.size());
  for (const auto& [name, node] : dir->entries) names.push_back(name);  // std::map: sorted
  return names;
}

Result<std::unique_ptr<FileLock>> MemStorage::LockFile(const std::string& path) {
  SP_ASSIGN_OR_RETURN(MemPath p, ParsePath(path));
  {
    std::lock_guard<std::mutex> lock(locks_->mu);
    if (locks_->held.count(p.text)) {
      return FailedPreconditionError("lock file '" + p.text + "' is held by another lock object");
    }
  }
  // Like O_CREAT: the file exists while locked.
  SP_ASSIGN_OR_RETURN(bool exists, Exists(p.text));
  if (!exists) {
    SP_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> f, NewWritableFile(p.text, {}));
    SP_RETURN_IF_ERROR(f->Close());
  }
  std::lock_guard<std::mutex> lock(locks_->mu);
  if (!locks_->held.insert(p.text).second) {
    return FailedPreconditionError("lock file '" + p.text + "' is held by another lock object");
  }
  return std::unique_ptr<FileLock>(new MemFileLock(locks_, p.text));
}

Status MemStorage::UnlockFile(std::unique_ptr<FileLock> lock) {
  if (lock == nullptr) return OkStatus();
  Status s = RemoveFile(lock->path());
  if (s.code() == StatusCode::kNotFound) s = OkStatus();
  lock.reset();  // releases
  return s;
}

}  // namespace internal_io

std::unique_ptr<Storage> NewMemStorage() { return std::make_unique<internal_io::MemStorage>(); }

}  // namespace shardpoint
