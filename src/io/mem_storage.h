// An in-memory Storage with a crash model, for tests.
//
// The store is a tree of nodes, like inodes: a file node holds its current
// bytes and the bytes of its last Sync(); a directory node holds its current
// entries and the entries made durable by its last SyncDir(). SimulateCrash()
// keeps only what a POSIX filesystem promises to keep: synced bytes, and
// entries (creations, renames, removals) of directories that were SyncDir'd
// since, all the way up from the root. A file created but never synced
// survives a crash (if its directory was synced) with no bytes.
//
// Semantics follow POSIX where tests could tell the difference: a file's
// parent directory must exist, NewWritableFile truncates an existing file in
// place, open file objects keep their node after a rename or removal, and
// directories can be renamed. Paths are normalized ("a//b/" is "a/b"); "/a"
// and "a" name the same node. Locks (LockFile) are held in a table of this
// storage, released when their FileLock is destroyed, as a process exit
// releases a POSIX lock. Thread-safe.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "shardpoint/storage.h"

namespace shardpoint::internal_io {

struct MemNode;
struct MemLockTable;

class MemStorage : public Storage {
 public:
  MemStorage();
  ~MemStorage() override;

  // Reverts every file to its last synced bytes and every directory to its
  // last SyncDir'd entries, as a power loss would. Open file objects keep
  // working on the (reverted) nodes they refer to.
  void SimulateCrash();

  // Storage:
  Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path,
                                                        const WriteFileOptions& options) override;
  Result<std::unique_ptr<ReadableFile>> NewReadableFile(const std::string& path) override;
  Status CreateDirs(const std::string& path) override;
  Status SyncDir(const std::string& path) override;
  Status Rename(const std::string& from, const std::string& to) override;
  Result<bool> Exchange(const std::string& a, const std::string& b) override;
  Status RemoveFile(const std::string& path) override;
  Status RemoveAll(const std::string& path) override;
  Result<bool> Exists(const std::string& path) override;
  Result<bool> IsDirectory(const std::string& path) override;
  Result<std::vector<std::string>> ListDir(const std::string& path) override;
  Result<std::unique_ptr<FileLock>> LockFile(const std::string& path) override;
  Status UnlockFile(std::unique_ptr<FileLock> lock) override;

 private:
  std::mutex mu_;  // guards the tree's directory entries (file bytes have their own lock)
  std::shared_ptr<MemNode> root_;
  const std::shared_ptr<MemLockTable> locks_;  // shared with the FileLocks
};

}  // namespace shardpoint::internal_io
