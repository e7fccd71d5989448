// Verify and describe a checkpoint without a training job.
//
// DescribeCheckpoint reads only the manifest and returns what it says: every
// tensor (key, dtype, global shape) with its stored chunks (box, data file,
// byte range), the objects, the common state's presence and size, the user
// metadata and the data files. VerifyCheckpoint re-reads everything and
// checks: the manifest decodes; every tensor is tiled exactly by its chunks;
// every data file is a valid safetensors file whose entries match the
// manifest; every chunk and object checksum. Faults are structured records
// (what, which key, chunk, file and byte range) with a one-line message.
//
// Both are plain functions of one process (no Comm); they are thread-safe in
// the sense that concurrent calls share nothing but the storage. Results are
// values owned by the caller.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "shardpoint/box.h"
#include "shardpoint/checkpoint_kind.h"
#include "shardpoint/dtype.h"
#include "shardpoint/resources.h"
#include "shardpoint/status.h"
#include "shardpoint/storage.h"

namespace shardpoint {

// ---- Describe -------------------------------------------------------------

struct ChunkDescription {
  Box box;                // in the global tensor
  uint32_t file = 0;      // index into CheckpointDescription::files
  uint64_t offset = 0;    // absolute byte offset in that file
  uint64_t nbytes = 0;    // box.num_elements() * DTypeSize(dtype)
  uint64_t checksum = 0;  // of the chunk's bytes, as stored in the manifest
};

struct TensorDescription {
  std::string key;
  DType dtype = DType::kF32;
  Shape shape;                           // global shape
  std::vector<ChunkDescription> chunks;  // disjoint, tiling the tensor, sorted by box
  uint64_t nbytes() const;               // sum of the chunks' bytes
};

struct ObjectDescription {
  std::string key;
  Shape index;  // empty if unsharded
  Shape grid;
  uint32_t file = 0;  // index into CheckpointDescription::files
  uint64_t offset = 0;
  uint64_t nbytes = 0;
};

struct CheckpointDescription {
  // kShardpoint, or kPyTorchDcp for a DCP (or Megatron torch_dist)
  // directory described from its index (checkpoint_kind.h).
  CheckpointKind kind = CheckpointKind::kShardpoint;
  uint32_t format_version = 0;
  std::vector<std::string> files;          // relative to the checkpoint directory
  std::vector<TensorDescription> tensors;  // sorted by key
  std::vector<ObjectDescription> objects;  // sorted by (key, index)
  bool has_common = false;
  uint64_t common_bytes = 0;
  std::string metadata_json;  // the user metadata given to Save ("" if none)
  // The manifest as JSON (stable key order), what `shardpoint inspect --json`
  // prints.
  std::string json;
};

// Resources (resources.h): storage (the rest is not used).
struct DescribeOptions : Resources {};

// Errors: NotFound when `dir` holds no manifest (nor DCP .metadata), DataLoss when corrupt.
Result<CheckpointDescription> DescribeCheckpoint(const std::string& dir,
                                                 const DescribeOptions& options = {});

// ---- Verify ---------------------------------------------------------------

struct VerifyFault {
  enum class Kind {
    kTiling,      // a tensor's chunks leave a gap or overlap (key set)
    kFileHeader,  // a data file's safetensors header is unreadable or disagrees (file set)
    kChunk,       // a chunk's bytes are unreadable or fail their checksum (key, chunk, file, range)
    kObject,      // an object's bytes likewise (key, object_index, file, range)
  };
  Kind kind = Kind::kChunk;
  std::string key;                    // tensor or object key; "" for kFileHeader
  int64_t chunk = -1;                 // kChunk: index into the tensor's chunks
  std::vector<int64_t> object_index;  // kObject: the object's index (empty if unsharded)
  std::string file;                   // data file relative to the checkpoint; "" for kTiling
  uint64_t begin = 0, end = 0;        // kChunk, kObject: byte range [begin, end) in `file`
  std::string message;                // one line naming all of the above
};

struct VerifyReport {
  // What the directory is (checkpoint_kind.h): kPyTorchDcp is checked for
  // structure, bounds, coverage and its zip CRC-32s (DCP stores no checksums).
  CheckpointKind kind = CheckpointKind::kShardpoint;
  int64_t tensors = 0;
  int64_t chunks_checked = 0;
  int64_t objects_checked = 0;
  uint64_t bytes_checked = 0;
  int64_t files = 0;
  double seconds = 0;               // wall time of the whole verify
  std::vector<VerifyFault> faults;  // sorted by message
  bool ok() const { return faults.empty(); }
};

// Resources (resources.h): storage, pool (chunks are read and checksummed
// on it and on the calling thread; io_threads when none is passed, default
// 4), log: one line with the outcome.
struct VerifyOptions : Resources {
  // Chunks are read in slices of at most this many bytes: memory is about
  // (io_threads + 1) x read_slice_bytes whatever the chunk sizes. Default
  // 1 MiB (LoadOptions::read_slice_bytes is the same knob).
  uint64_t read_slice_bytes = uint64_t{1} << 20;
  // Each chunk's reads are announced to the storage in windows of this many
  // bytes, one ahead (as LoadOptions::prefetch_bytes). 0: none. Default 16 MiB.
  uint64_t prefetch_bytes = uint64_t{16} << 20;
  // Deprecated spellings of io_threads and read_slice_bytes, kept so that old
  // code compiles: when > 0 they are used instead. Default 0.
  int threads = 0;
  size_t slice_bytes = 0;
  // progress(done, total): bytes checksummed so far, called after each slice,
  // serialized, from reader threads. Default: empty = none.
  std::function<void(uint64_t done, uint64_t total)> progress;
};

// Returns an error only when the manifest cannot be read (NotFound, DataLoss,
// IOError); every other problem is a fault in the report.
Result<VerifyReport> VerifyCheckpoint(const std::string& dir, const VerifyOptions& options = {});

}  // namespace shardpoint
