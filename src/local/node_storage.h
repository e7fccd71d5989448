// The storage of a node's local root, as every local-tier step sees it.
//
// RootedStorage maps every absolute path "/p" to "<root>/p" of the base
// storage, so that the ranks of all nodes name a local checkpoint by the
// same path ("/iter_0000100") while each reaches only its own node's root:
// the collective save and load, which agree on one directory name for every
// rank, work unchanged. It also drops Sync and SyncDir: the local tier is
// memory, not durable (a node's memory lost is what the replicas are for),
// so nothing waits for fsync. It is internal_io::NodeLocal: a save there
// keeps every part of its manifest on rank 0's node.
//
// With TakeSpares (a local save writing over an old checkpoint's pages,
// recycle.h), each data file created under the save's data directory is
// first a spare file renamed into place (one of the same name where there is
// one), opened without truncation (internal_io::OverwriteOpener of the base)
// and truncated on Close to the bytes written: its tmpfs pages are reused.
// MapFile maps a node file where the base is a FileMapper itself (the
// default storage): the recovery reads its node's copy in place.
// Thread-safe as its base.
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "shardpoint/storage.h"
#include "src/io/file_map.h"
#include "src/io/node_local.h"

namespace shardpoint::internal_local {

class RootedStorage : public StorageWrapper,
                      public internal_io::NodeLocal,
                      public internal_io::FileMapper {
 public:
  RootedStorage(Storage* base, std::string root);
  const std::string& root() const { return root_; }
  // "<root>/p" for "/p" (and "<root>/p" for a relative "p").
  std::string Map(const std::string& path) const;

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
  // Maps where the base storage itself maps (not through a wrapper of it);
  // FailedPrecondition otherwise.
  Result<std::unique_ptr<internal_io::MappedFile>> MapFile(const std::string& path) override;

  // From now on, files created directly under `data_dir` take spares from
  // `spare_dir` (both node paths) where the base storage can overwrite.
  void TakeSpares(std::string spare_dir, std::string data_dir);
  // How many spare files were taken (for the tests and the bench).
  int spares_taken() const;

 private:
  // A spare renamed to `path` (mapped), or false where none is left.
  Result<bool> TakeSpare(const std::string& path);

  std::string root_;
  std::string spare_dir_, data_dir_;  // empty: no spares
  mutable std::mutex mu_;
  std::optional<std::vector<std::string>> spares_;  // listed on first use
  int taken_ = 0;
};

}  // namespace shardpoint::internal_local
