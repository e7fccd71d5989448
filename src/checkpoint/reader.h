// Executes a load plan: reads exactly the planned byte runs, in parallel,
// straight into destination memory where it is contiguous and of the stored
// dtype, through bounded staging buffers otherwise; verifies the checksum of
// every chunk read whole.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "shardpoint/storage.h"
#include "src/format/manifest.h"
#include "src/io/thread_pool.h"
#include "src/plan/load_plan.h"

namespace shardpoint::internal {

// The data files of a checkpoint, opened on first use. Thread-safe.
class DataFiles {
 public:
  DataFiles(Storage* storage, std::string dir, const Manifest* m);
  ~DataFiles();
  Result<const ReadableFile*> Get(uint32_t file);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

struct ReadOptions {
  bool verify_checksums = true;
  size_t staging_bytes = size_t{16} << 20;  // per task, for strided or converted pieces
};

// REQUIRES: plan computed against `m`. Errors name the key, chunk, file and
// byte range. Adds the bytes read to *bytes_read.
Status ExecuteLoadPlan(const Manifest& m, const LoadPlan& plan, DataFiles* files, ThreadPool* pool,
                       const ReadOptions& options, std::atomic<uint64_t>* bytes_read);

// Reads `nbytes` at `offset` of manifest file `file` into dst and checks the
// checksum: for objects.
Status ReadVerified(DataFiles* files, const Manifest& m, uint32_t file, uint64_t offset,
                    uint64_t nbytes, uint64_t checksum, const std::string& what, char* dst);

// Checks the checksum of `nbytes` at `offset` of manifest file `file`,
// reading them in slices of at most `slice_bytes` (the memory it uses);
// `on_slice(n)` is called after each slice of n bytes (may be empty). For
// `verify`: a chunk of any size in bounded memory.
Status CheckStored(DataFiles* files, const Manifest& m, uint32_t file, uint64_t offset,
                   uint64_t nbytes, uint64_t checksum, const std::string& what, size_t slice_bytes,
                   const std::function<void(uint64_t)>& on_slice);

}  // namespace shardpoint::internal
