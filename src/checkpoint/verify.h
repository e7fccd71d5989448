// Verify: re-reads a whole checkpoint and checks everything that can be
// checked without a training job.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "shardpoint/resources.h"
#include "shardpoint/storage.h"
#include "shardpoint/verify.h"
#include "src/format/manifest.h"

namespace shardpoint::internal_checkpoint {

struct VerifyReport {
  internal_format::Manifest manifest;
  int64_t chunks_checked = 0;
  int64_t objects_checked = 0;
  uint64_t bytes_checked = 0;
  // One record per fault, its message naming the key, chunk, file and byte
  // range; sorted by message.
  std::vector<VerifyFault> faults;
  bool ok() const { return faults.empty(); }
};

// Checks: the manifest decodes; every tensor is tiled exactly by its chunks;
// every data file is a valid safetensors file whose entries match the
// manifest (name, dtype, shape, byte range); every chunk and object checksum.
// Returns an error only if the manifest cannot be read; faults go in the report.
// Memory: io_threads + 1 slices of `read_slice_bytes`, whatever the chunk
// sizes. Resources: pool and io_threads as everywhere (src/io/resources.h);
// storage is the argument, not the field. `progress(done, total)`: bytes
// checksummed so far, called after each slice (serialized; may be empty).
struct VerifyOptions : Resources {
  uint64_t read_slice_bytes = uint64_t{1} << 20;
  uint64_t prefetch_bytes = uint64_t{16} << 20;  // announced ahead (ReadableFile::Prefetch)
  std::function<void(uint64_t done, uint64_t total)> progress;
};
Result<VerifyReport> VerifyCheckpoint(Storage* storage, const std::string& dir,
                                      const VerifyOptions& options = {});

}  // namespace shardpoint::internal_checkpoint
