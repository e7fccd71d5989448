// Storage: all file access of shardpoint goes through this injected interface.
//
// Implementations: POSIX files (DefaultStorage, with O_DIRECT where the
// filesystem allows it and a buffered fallback), an in-memory store for tests
// (NewMemStorage), and wrappers built on StorageWrapper (below), such as the
// fault-injecting one (src/io/fault_storage.h). errno becomes a Status in
// exactly one place (src/io/posix_storage.cc). A Storage is thread-safe; a
// file object may be used from several threads at once for WriteAt/ReadAt at
// disjoint ranges.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "shardpoint/status.h"

namespace shardpoint {

struct WriteFileOptions {
  // Ask for O_DIRECT. If the filesystem refuses it, the file is opened
  // buffered and direct() returns false.
  bool direct = false;
};

class WritableFile {
 public:
  virtual ~WritableFile() = default;
  // Writes n bytes at offset. If direct(): offset, n and data must be multiples
  // of / aligned to alignment().
  virtual Status WriteAt(uint64_t offset, const void* data, size_t n) = 0;
  virtual Status Truncate(uint64_t size) = 0;
  // Allocates the file's space up front for `size` bytes (its size becomes at
  // least `size`): a full disk fails here, before any data is written, and the
  // filesystem can lay the file out in large extents. Best effort: where the
  // filesystem cannot, it succeeds and does nothing. Default: does nothing.
  virtual Status Reserve(uint64_t size) {
    (void)size;
    return OkStatus();
  }
  virtual Status Sync() = 0;  // data and size durable (fsync)
  virtual Status Close() = 0;
  virtual bool direct() const { return false; }
  virtual size_t alignment() const { return 1; }
  virtual const std::string& path() const = 0;
};

class ReadableFile {
 public:
  virtual ~ReadableFile() = default;
  // Reads exactly n bytes at offset into dst; a short read is DataLoss naming
  // the file and byte range.
  virtual Status ReadAt(uint64_t offset, size_t n, void* dst) const = 0;
  virtual Result<uint64_t> Size() const = 0;
  virtual const std::string& path() const = 0;
  // Whether reads bypass the page cache (Storage::NewDirectReadableFile).
  virtual bool direct() const { return false; }
  // A hint: [offset, offset + n) will be read soon, so the storage may start
  // fetching it in the background (the POSIX storage: posix_fadvise
  // WILLNEED, read-ahead of the whole range in large requests; nothing for
  // a direct file). Default: nothing.
  virtual void Prefetch(uint64_t offset, size_t n) const {
    (void)offset;
    (void)n;
  }
};

// A lock taken by Storage::LockFile. Destroying it releases the lock (without
// removing the file); UnlockFile releases it and removes the file.
class FileLock {
 public:
  virtual ~FileLock() = default;
  virtual const std::string& path() const = 0;
};

class Storage {
 public:
  virtual ~Storage() = default;
  // Creates or truncates `path`.
  virtual Result<std::unique_ptr<WritableFile>> NewWritableFile(
      const std::string& path, const WriteFileOptions& options) = 0;
  virtual Result<std::unique_ptr<ReadableFile>> NewReadableFile(const std::string& path) = 0;
  // As NewReadableFile, reading with O_DIRECT where the storage can
  // (ReadableFile::direct() says whether it does): no page cache is filled or
  // read, any offset, size and buffer are accepted. Default: NewReadableFile
  // (so a wrapper overriding that keeps its behaviour).
  virtual Result<std::unique_ptr<ReadableFile>> NewDirectReadableFile(const std::string& path) {
    return NewReadableFile(path);
  }
  // Creates `path` and missing parents; OK if it exists. Every directory it
  // creates is durable when it returns (POSIX: the parent of each is fsynced
  // after it is made, top-down), so what a caller later makes durable inside
  // `path` (files and their SyncDir) cannot be lost with a new ancestor.
  virtual Status CreateDirs(const std::string& path) = 0;
  // Makes renames and creations inside directory `path` durable.
  virtual Status SyncDir(const std::string& path) = 0;
  // Atomically replaces `to` with `from`.
  virtual Status Rename(const std::string& from, const std::string& to) = 0;
  // Atomically swaps the entries `a` and `b` (both must exist), as Linux
  // renameat2(RENAME_EXCHANGE). Returns false, changing nothing, where the
  // storage or the filesystem cannot (the caller falls back to two renames).
  virtual Result<bool> Exchange(const std::string& a, const std::string& b);
  virtual Status RemoveFile(const std::string& path) = 0;
  // Removes a directory and everything below it; OK if it does not exist.
  virtual Status RemoveAll(const std::string& path) = 0;
  virtual Result<bool> Exists(const std::string& path) = 0;
  virtual Result<bool> IsDirectory(const std::string& path) = 0;
  // Names (not paths) of the entries of directory `path`, sorted.
  virtual Result<std::vector<std::string>> ListDir(const std::string& path) = 0;

  // Takes an exclusive lock on file `path` (created if missing), without
  // waiting: FailedPrecondition naming the holder if another lock object
  // holds it, in this process or another. The lock belongs to the returned
  // object, not to a pid: it dies with its process (POSIX: an open file
  // description lock, F_OFD_SETLK, which the kernel drops when the process
  // exits however it exits; NFS v4 forwards it to the server), so a crashed
  // or restarted job never leaves a stale lock. POSIX writes "pid <pid> host
  // <host>" into the file for the error message of the next taker.
  virtual Result<std::unique_ptr<FileLock>> LockFile(const std::string& path) = 0;
  // Removes the lock's file, then releases the lock (in that order, so that a
  // process that opened the file meanwhile finds it unlinked and retries).
  virtual Status UnlockFile(std::unique_ptr<FileLock> lock) = 0;

  // The commit primitive: makes `path` hold exactly `data`, all at once and
  // durably, so a reader finds no file or the whole of it (a save's
  // manifest, the manager's `latest`). exclusive: FailedPrecondition if
  // `path` exists. Default (POSIX, memory): write `path`.tmp, fsync it,
  // rename it over `path`, fsync the directory; the exclusive check is an
  // Exists before the rename, so two concurrent writers can both pass it
  // (CheckpointManager's lock orders writers there). An object store
  // creates the object with one conditional PUT (If-None-Match: *): of two
  // concurrent writers exactly one succeeds.
  virtual Status CommitFile(const std::string& path, const std::string& data, bool exclusive);
  // Whether Rename and Exchange work under `path`. Object stores have no rename: there a
  // checkpoint is never overwritten in place (save to a new directory, as
  // CheckpointManager does).
  virtual bool SupportsRename(const std::string& path) const {
    (void)path;
    return true;
  }

  // Convenience: the whole file as bytes.
  Result<std::string> ReadFileToString(const std::string& path);
  // Convenience: write, fsync, close (not atomic; see format/commit).
  Status WriteStringToFile(const std::string& path, const std::string& data);
};

// Forwards every call to `base` (not owned; must outlive the wrapper). Test
// doubles and instrumentation derive from it and override only what they
// change, as LevelDB's EnvWrapper.
class StorageWrapper : public Storage {
 public:
  explicit StorageWrapper(Storage* base) : base_(base) {}
  Storage* base() const { return base_; }

  Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path,
                                                        const WriteFileOptions& options) override {
    return base_->NewWritableFile(path, options);
  }
  Result<std::unique_ptr<ReadableFile>> NewReadableFile(const std::string& path) override {
    return base_->NewReadableFile(path);
  }
  Status CreateDirs(const std::string& path) override { return base_->CreateDirs(path); }
  Status SyncDir(const std::string& path) override { return base_->SyncDir(path); }
  Status Rename(const std::string& from, const std::string& to) override {
    return base_->Rename(from, to);
  }
  Result<bool> Exchange(const std::string& a, const std::string& b) override {
    return base_->Exchange(a, b);
  }
  Status RemoveFile(const std::string& path) override { return base_->RemoveFile(path); }
  Status RemoveAll(const std::string& path) override { return base_->RemoveAll(path); }
  Result<bool> Exists(const std::string& path) override { return base_->Exists(path); }
  Result<bool> IsDirectory(const std::string& path) override { return base_->IsDirectory(path); }
  Result<std::vector<std::string>> ListDir(const std::string& path) override {
    return base_->ListDir(path);
  }
  Result<std::unique_ptr<FileLock>> LockFile(const std::string& path) override {
    return base_->LockFile(path);
  }
  Status UnlockFile(std::unique_ptr<FileLock> lock) override {
    return base_->UnlockFile(std::move(lock));
  }
  // Not forwarded: the default runs through this wrapper's own calls (so a
  // fault-injecting wrapper sees the steps), unless the base has its own
  // commit (an object store), which then is used.
  Status CommitFile(const std::string& path, const std::string& data, bool exclusive) override {
    if (!base_->SupportsRename(path)) return base_->CommitFile(path, data, exclusive);
    return Storage::CommitFile(path, data, exclusive);
  }
  bool SupportsRename(const std::string& path) const override {
    return base_->SupportsRename(path);
  }

 private:
  Storage* const base_;
};

// Forwarding file objects, for wrappers that change some file calls.
class WritableFileWrapper : public WritableFile {
 public:
  explicit WritableFileWrapper(std::unique_ptr<WritableFile> base) : base_(std::move(base)) {}
  Status WriteAt(uint64_t offset, const void* data, size_t n) override {
    return base_->WriteAt(offset, data, n);
  }
  Status Truncate(uint64_t size) override { return base_->Truncate(size); }
  Status Reserve(uint64_t size) override { return base_->Reserve(size); }
  Status Sync() override { return base_->Sync(); }
  Status Close() override { return base_->Close(); }
  bool direct() const override { return base_->direct(); }
  size_t alignment() const override { return base_->alignment(); }
  const std::string& path() const override { return base_->path(); }

 private:
  const std::unique_ptr<WritableFile> base_;
};

class ReadableFileWrapper : public ReadableFile {
 public:
  explicit ReadableFileWrapper(std::unique_ptr<ReadableFile> base) : base_(std::move(base)) {}
  Status ReadAt(uint64_t offset, size_t n, void* dst) const override {
    return base_->ReadAt(offset, n, dst);
  }
  Result<uint64_t> Size() const override { return base_->Size(); }
  const std::string& path() const override { return base_->path(); }
  bool direct() const override { return base_->direct(); }
  void Prefetch(uint64_t offset, size_t n) const override { base_->Prefetch(offset, n); }

 private:
  const std::unique_ptr<ReadableFile> base_;
};

// The storage every path goes through unless Resources names another: a
// path starting with "s3://" (s3://bucket/prefix/...) goes to the object
// store (docs/object-store.md; endpoint, region and credentials from the AWS
// environment variables and ~/.aws profiles, resolved on first use), any
// other to the POSIX files. Lives for the process.
Storage* DefaultStorage();
// The POSIX storage itself. Stateless; lives for the process.
Storage* PosixFileStorage();
// A fresh in-memory storage (paths are plain strings; directories implicit
// but tracked so ListDir works).
std::unique_ptr<Storage> NewMemStorage();

}  // namespace shardpoint
