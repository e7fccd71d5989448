// The requests a load reads with: which byte ranges of which files, cut how.
// Pure planning (no I/O): src/checkpoint/reader.cc executes the tasks.
//
// Per stored chunk the reader names the chunk-relative bytes its pieces
// need. They are widened to whole verification blocks when verifying
// (format v2 block checksums; the whole chunk where it has none), ranges of
// a file at most read_gap_bytes apart are bridged where both lie in one
// read_slice_bytes unit of a chunk, elsewhere smallest gap first while the
// unneeded bytes read so stay within max_gap_fraction of the needed ones, and
// the result is cut on the block grid into requests of at most
// read_slice_bytes; a block larger than that is a task of its own, read in
// slices and hashed as a stream.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "src/format/manifest.h"

namespace shardpoint::internal_plan {

// Sorted, disjoint byte ranges [first, second).
using ByteRanges = std::vector<std::pair<uint64_t, uint64_t>>;

// The needs of one stored chunk.
struct ChunkReads {
  int64_t tensor = 0, chunk = 0;
  ByteRanges needed;         // chunk-relative bytes some piece needs, merged
  uint64_t piece_bytes = 0;  // the pieces' bytes, summed (what a full read counts as needed)
};

// One request's worth of a chunk: chunk-relative bytes [a, b).
struct ReadSegment {
  int64_t tensor = 0, chunk = 0;
  uint64_t a = 0, b = 0;
  uint64_t file_at = 0;  // absolute file offset of a
};

// One task: one request of absolute file bytes [begin, end) holding its
// segments in file order (bytes between them are bridged gaps); or, with
// `stream`, one verification block larger than a slice, read in slices and
// hashed as a stream (one segment).
struct ReadTask {
  uint32_t file = 0;
  uint64_t begin = 0, end = 0;
  std::vector<ReadSegment> segs;
  bool stream = false;
};

// The knobs, named as LoadOptions names them (shardpoint/checkpoint.h).
struct ReadTaskOptions {
  bool verify_checksums = true;
  uint64_t read_slice_bytes = uint64_t{1} << 20;  // the largest request; rounded down to 8 bytes
  uint64_t read_gap_bytes = uint64_t{256} << 10;
  double max_gap_fraction = 0.05;
  // Files (by index, may be null) whose gaps are never bridged (strided view
  // files: the bytes between two runs are elements from anywhere).
  const std::vector<bool>* unbridged_files = nullptr;
};

// The tasks reading `chunks` of `m`, sorted by file and offset. With `spans`
// (parallel to `chunks`: sorted, disjoint chunk-relative ranges, on the
// verification block grid when verifying) only those are read, and `needed`
// gets the needed bytes inside them, once each; without, the pieces' bytes.
std::vector<ReadTask> BuildReadTasks(const internal_format::Manifest& m,
                                     const std::vector<ChunkReads>& chunks,
                                     const std::vector<ByteRanges>* spans,
                                     const ReadTaskOptions& options, uint64_t* needed);

// The parts of sorted, disjoint `x` inside sorted, disjoint `y`.
ByteRanges IntersectRanges(const ByteRanges& x, const ByteRanges& y);

}  // namespace shardpoint::internal_plan
