// Executes a load plan in few large requests: the byte ranges the pieces
// need are widened to whole verification blocks (format v2 block checksums;
// a whole chunk where it has none), ranges of a file separated by small gaps
// are merged (within a bound on the bytes read that no piece needs), and the
// result is read in requests of at most a slice, in parallel, straight into
// destination memory where one contiguous destination takes a whole request,
// else into a bounded staging buffer and scattered from memory. Every block
// is verified as its bytes are placed, hashed and placed in 128 KiB pieces
// (unless verification is off): a mismatch fails the load (DataLoss naming
// the block), whose destinations may then hold bytes of the failed block.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "shardpoint/storage.h"
#include "src/dcp/strided_file.h"
#include "src/format/manifest.h"
#include "src/io/thread_pool.h"
#include "src/plan/load_plan.h"

namespace shardpoint::internal_checkpoint {

// The data files of a checkpoint, opened on first use. Thread-safe. A file
// that one of `views` describes is opened as that strided view of its base
// file (src/dcp/strided_file.h). `direct`: files are opened with
// Storage::NewDirectReadableFile (O_DIRECT where the filesystem allows it).
class DataFiles {
 public:
  DataFiles(Storage* storage, std::string dir, const internal_format::Manifest* m,
            const std::vector<internal_dcp::StridedView>* views = nullptr, bool direct = false);
  ~DataFiles();
  Result<const ReadableFile*> Get(uint32_t file);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

struct ReadOptions {
  bool verify_checksums = true;
  // The knobs of the read planner (src/plan/read_tasks.h), named as
  // LoadOptions names them.
  size_t read_slice_bytes = size_t{1} << 20;  // the largest request (a slice), per task
  // The tasks of a file are announced to the storage (ReadableFile::Prefetch)
  // in windows of this many bytes, one window ahead of the reads; 0: never.
  uint64_t prefetch_bytes = uint64_t{16} << 20;
  // Ranges of one file separated by at most this many unneeded bytes are read
  // by one request where both lie in one read_slice_bytes unit of a chunk, and
  // elsewhere as long as the unneeded bytes read this way stay within
  // max_gap_fraction of the needed ones (smallest gaps first).
  uint64_t read_gap_bytes = uint64_t{256} << 10;
  double max_gap_fraction = 0.05;
  // Files (by index, may be null) whose gaps are never bridged: strided view
  // files, where the bytes between two runs are elements from anywhere in
  // the storage (src/dcp/strided_file.h).
  const std::vector<bool>* unbridged_files = nullptr;
};

// What a load read; shared by the threads of one load.
struct ReadStats {
  std::atomic<uint64_t> bytes{0};     // read from storage
  std::atomic<uint64_t> requests{0};  // ReadAt calls
  std::atomic<uint64_t> needed{0};    // bytes the pieces needed
};

// REQUIRES: plan computed against `m`. Errors name the key, chunk, file and
// byte range.
Status ExecuteLoadPlan(const internal_format::Manifest& m, const internal_plan::LoadPlan& plan,
                       DataFiles* files, ThreadPool* pool, const ReadOptions& options,
                       ReadStats* stats);

// Chunk-relative bytes [a, b) of chunk `chunk` of tensor `tensor`.
struct ChunkSpan {
  int64_t tensor = 0, chunk = 0;
  uint64_t a = 0, b = 0;
};

// A part of another rank's piece that this rank reads for it (cooperative
// load): the piece's elements inside chunk-relative bytes [a, b), flat
// elements [flat_base, ...) of the piece, go packed (stored dtype, in flat
// order) to `out`. piece.src_dtype == piece.dst_dtype; piece.dst is unused.
struct PiecePart {
  internal_plan::ReadPiece piece;
  uint64_t a = 0, b = 0;
  int64_t flat_base = 0;
  char* out = nullptr;
};

// Reads `spans` (whole verification blocks when verifying; else only the
// bytes some piece or part needs inside them) and places their bytes: into
// the destinations of the `own` pieces (only their bytes inside the spans)
// and into the parts. Every block is verified as its bytes are placed.
// stats->needed counts the bytes inside the spans that a piece or part
// needs, once each.
Status ExecuteSpans(const internal_format::Manifest& m,
                    const std::vector<const internal_plan::ReadPiece*>& own,
                    const std::vector<PiecePart>& parts, const std::vector<ChunkSpan>& spans,
                    DataFiles* files, ThreadPool* pool, const ReadOptions& options,
                    ReadStats* stats);

// Reads `nbytes` at `offset` of manifest file `file` into dst and checks the
// checksum: for objects.
Status ReadVerified(DataFiles* files, const internal_format::Manifest& m, uint32_t file,
                    uint64_t offset, uint64_t nbytes, uint64_t checksum, const std::string& what,
                    char* dst);

// Checks the checksum of `nbytes` at `offset` of manifest file `file`, and
// each of its block checksums (blocks of m.block_size; none if empty),
// reading them in slices of at most `slice_bytes` (or one block; the memory
// it uses), announcing each `prefetch_bytes` (0: none) to the storage one
// ahead of its reads;
// `on_slice(n)` is called after each slice of n bytes (may be empty). For
// `verify`: a chunk of any size in bounded memory.
Status CheckStored(DataFiles* files, const internal_format::Manifest& m, uint32_t file,
                   uint64_t offset, uint64_t nbytes, uint64_t checksum,
                   const std::vector<uint64_t>& block_sums, const std::string& what,
                   size_t slice_bytes, uint64_t prefetch_bytes,
                   const std::function<void(uint64_t)>& on_slice);

}  // namespace shardpoint::internal_checkpoint
