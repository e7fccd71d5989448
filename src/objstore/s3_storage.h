// The object-store Storage: paths "s3://bucket/key/..." on an S3-compatible
// server, through one S3Client (s3_client.h).
//
// Mapping of the file model:
//   * a file is an object; a directory is a key prefix ("dir/"), which
//     exists while an object lies under it. CreateDirs and SyncDir do
//     nothing (no directories to make or fsync).
//   * a WritableFile streams: each write is copied into its part's buffer
//     (S3Upload's part window: any order, any threads; writes far beyond
//     the lowest unsent part are held in a copy until it nears), and full
//     parts are sent as a multipart upload (parts in parallel, bounded
//     memory). Sync completes the upload: only then does the object exist,
//     whole. Truncate may only extend (zeros).
//   * a ReadableFile is ranged GETs, and a HEAD only if its Size() is asked
//     (opening costs no request); loads read in requests of at least
//     S3Options::read_request_bytes (PreferredReadSize).
//   * ReadWholeFile (src/io/whole_file.h) reads a small file (a manifest)
//     in one GET, its existence and size from the same response.
//   * CommitFile is one PUT, conditional (If-None-Match: *) when exclusive:
//     the commit point of a save.
//   * Rename and Exchange do not exist (SupportsRename() is false).
//   * RemoveFile and RemoveAll delete objects (RemoveAll lists first).
//   * HoldCompletes (src/io/held_completes.h): while a save checks its
//     directory, Sync of a file under it sends every part but does not
//     complete; ReleaseCompletes completes (or aborts) them, in parallel.
//   * LockFile is a lease: a lock object created with a conditional PUT,
//     holding its owner and an expiry, renewed by a background thread every
//     lease/3 while held, and taken over by another job only once expired.
// Thread-safe.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "shardpoint/storage.h"
#include "src/io/abandoned_writes.h"
#include "src/io/held_completes.h"
#include "src/io/read_size.h"
#include "src/io/whole_file.h"
#include "src/objstore/s3_client.h"
#include "src/objstore/s3_part_pool.h"

namespace shardpoint::internal_objstore {

// Splits "s3://bucket/key" into bucket and key (the key may be empty).
// InvalidArgument naming the path if it is not one.
Status ParseS3Path(const std::string& path, std::string* bucket, std::string* key);

class S3Upload;

class S3Storage : public Storage,
                  public internal_io::PreferredReadSize,
                  public internal_io::WholeFileRead,
                  public internal_io::HeldCompletes,
                  public internal_io::AbandonedWrites {
 public:
  explicit S3Storage(std::unique_ptr<S3Client> client);
  ~S3Storage() override;
  S3Client* client() const { return client_.get(); }
  // The part buffers its uploads share (tests read allocated()).
  const PartPool& part_pool() const { return *parts_; }
  // How long a lock lease lasts without renewal (S3Options::lease_ms, default
  // 60 s): the time a crashed job's lock blocks the next one. Tests shorten it.
  void set_lease_ms(int ms) { lease_ms_ = ms; }

  Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path,
                                                        const WriteFileOptions& options) override;
  Result<std::unique_ptr<ReadableFile>> NewReadableFile(const std::string& path) override;
  Status CreateDirs(const std::string& path) override;
  Status SyncDir(const std::string& path) override;
  Status Rename(const std::string& from, const std::string& to) override;
  Status RemoveFile(const std::string& path) override;
  Status RemoveAll(const std::string& path) override;
  Result<bool> Exists(const std::string& path) override;
  Result<bool> IsDirectory(const std::string& path) override;
  Result<std::vector<std::string>> ListDir(const std::string& path) override;
  Result<std::unique_ptr<FileLock>> LockFile(const std::string& path) override;
  Status UnlockFile(std::unique_ptr<FileLock> lock) override;
  Status CommitFile(const std::string& path, const std::string& data, bool exclusive) override;
  bool SupportsRename(const std::string&) const override { return false; }
  // S3Options::read_request_bytes: a GET is a round trip.
  uint64_t PreferredReadBytes(const std::string&) override {
    return client_->options().read_request_bytes;
  }
  // A manifest or index read whole: one GET (S3Client::GetObject), no HEAD.
  bool ReadsWholeFiles(const std::string&) override { return true; }
  Result<std::optional<std::string>> ReadWholeFile(const std::string& path) override;
  void HoldCompletes(const std::string& dir) override;
  Status ReleaseCompletes(const std::string& dir, bool complete) override;
  // One ListMultipartUploads of `dir`'s prefix, then an abort of each taken.
  Result<uint64_t> AbortAbandonedWrites(const std::string& dir, const Which& which) override;

  // For its writable files: whether a hold covers `path`, and taking a synced
  // upload into it (FailedPrecondition if the hold ended meanwhile).
  bool Holding(const std::string& path);
  Status Hold(const std::string& path, std::shared_ptr<S3Upload> upload);

 private:
  const std::unique_ptr<S3Client> client_;
  // Kept across files and saves, up to max_connections idle buffers: the next
  // save writes into pages it already has.
  const std::shared_ptr<PartPool> parts_;
  int lease_ms_;
  // Holds by directory prefix ("s3://b/dir/"): how many holders, and the
  // uploads synced under it, each waiting for its complete. Destroyed first:
  // an upload never released is aborted while the client still exists.
  struct HeldDir {
    int holders = 0;
    std::vector<std::shared_ptr<S3Upload>> uploads;
  };
  std::mutex held_mu_;
  std::map<std::string, HeldDir> held_;
};

}  // namespace shardpoint::internal_objstore
