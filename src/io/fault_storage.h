// A fault-injecting Storage wrapper for tests.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "shardpoint/storage.h"

namespace shardpoint::internal_io {

// Wraps `base` (not owned; must outlive this). Counts calls and fails chosen
// ones with IOError (message contains "injected"), as a disk would; every
// other call is forwarded (StorageWrapper). File objects it returns refer to
// this FaultStorage, which must outlive them.
class FaultStorage : public StorageWrapper {
 public:
  explicit FaultStorage(Storage* base) : StorageWrapper(base) {}

  // The n-th WriteAt (1-based, counted over all files) and every later one
  // fails with "No space left on device (injected)". 0 = never.
  void FailWritesFrom(int64_t n) { fail_write_from_ = n; }
  // Renames whose target path ends with `suffix` fail. Empty = never.
  void FailRenameTo(const std::string& suffix);
  // Reserve of files fails with "No space left on device (injected)".
  void FailReserves(bool on) { fail_reserve_ = on; }
  // Sync of files fails.
  void FailSyncs(bool on) { fail_sync_ = on; }
  // The n-th ReadAt (1-based, over all files) and every later one fails with
  // "Input/output error (injected)". 0 = never.
  void FailReadsFrom(int64_t n) { fail_read_from_ = n; }
  int64_t writes() const { return writes_.load(); }
  int64_t reads() const { return reads_.load(); }

  // Storage:
  Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path,
                                                        const WriteFileOptions& options) override;
  Result<std::unique_ptr<ReadableFile>> NewReadableFile(const std::string& path) override;
  Status Rename(const std::string& from, const std::string& to) override;
  Result<bool> Exchange(const std::string& a, const std::string& b) override;

 private:
  friend class FaultWritableFile;
  friend class FaultReadableFile;
  std::atomic<int64_t> fail_write_from_{0};
  std::atomic<int64_t> writes_{0};
  std::atomic<bool> fail_sync_{false};
  std::atomic<bool> fail_reserve_{false};
  std::atomic<int64_t> fail_read_from_{0};
  std::atomic<int64_t> reads_{0};
  std::mutex mu_;
  std::string fail_rename_suffix_;  // guarded by mu_
};

}  // namespace shardpoint::internal_io
