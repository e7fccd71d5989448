// The manifest: the index of a checkpoint (format v2, docs/format.md; v1
// still decodes).
//
// Binary, little-endian, with a trailing checksum. EncodeManifest and
// DecodeManifest are inverses; DecodeManifest validates every size, offset
// and count before use (untrusted input) and errors are DataLoss.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "shardpoint/box.h"
#include "shardpoint/dtype.h"
#include "shardpoint/status.h"

namespace shardpoint::internal_format {

inline constexpr uint32_t kFormatVersion = 2;
// Block size of the block checksums a save writes (docs/format.md says why).
inline constexpr uint64_t kDefaultBlockSize = uint64_t{1} << 20;
inline constexpr char kManifestName[] = "manifest";
// An encoded object record's fixed bytes: it takes these plus its key and
// 8 per dimension of its index and of its grid.
inline constexpr size_t kMinObjectRecordBytes = 4 + 1 + 1 + 4 + 8 + 8 + 8;
inline constexpr char kDataDir[] = "data";

struct ChunkRecord {
  Box box;                // in the global tensor
  uint32_t file = 0;      // index into Manifest::files
  uint64_t offset = 0;    // absolute byte offset in the file
  uint64_t nbytes = 0;    // == box.num_elements() * DTypeSize(dtype)
  uint64_t checksum = 0;  // Checksum64 of the chunk's bytes
  // Format v2: Checksum64 of each Manifest::block_size bytes of the chunk
  // (the last block may be shorter), or empty: the chunk is verified whole.
  std::vector<uint64_t> block_sums;
};

struct TensorRecord {
  std::string key;
  DType dtype = DType::kF32;
  Shape shape;                      // global shape
  std::vector<ChunkRecord> chunks;  // disjoint, tiling the tensor; sorted by box
};

struct ObjectRecord {
  std::string key;
  Shape index;  // empty if unsharded
  Shape grid;
  uint32_t file = 0;
  uint64_t offset = 0;
  uint64_t nbytes = 0;
  uint64_t checksum = 0;
};

struct Manifest {
  uint32_t version = kFormatVersion;  // 1 or 2; EncodeManifest writes this version
  // v2: the size of the blocks of ChunkRecord::block_sums (a power of two,
  // >= 4096); 0 in v1, which has no block checksums.
  uint64_t block_size = kDefaultBlockSize;
  std::vector<std::string> files;     // relative to the checkpoint dir, e.g. "data/0.safetensors"
  std::vector<TensorRecord> tensors;  // sorted by key, keys unique
  std::vector<ObjectRecord> objects;  // sorted by (key, index)
  bool has_common = false;
  std::string common;         // the common blob
  std::string metadata_json;  // user metadata

  // Index of the tensor with `key`, or -1 (binary search).
  int64_t FindTensor(std::string_view key) const;
};

// The unit in which a chunk's bytes are verified: block_size where the chunk
// has block checksums, else the whole chunk (v1, or a chunk without them).
inline uint64_t VerifyBlock(const Manifest& m, const ChunkRecord& c) {
  return c.block_sums.empty() || m.block_size == 0 ? std::max<uint64_t>(c.nbytes, 1) : m.block_size;
}
// Number of blocks of `block` bytes in `nbytes` (0 for an empty chunk).
inline uint64_t NumBlocks(uint64_t nbytes, uint64_t block) {
  return nbytes == 0 ? 0 : (nbytes - 1) / block + 1;
}

std::string EncodeManifest(const Manifest& m);
// Validates structure: magic, version, counts, bounds, sorted unique keys,
// chunk boxes inside their tensor with nbytes consistent, file indices valid,
// file names relative without ".." or "/" beyond "data/". `name` names the
// file in errors.
Result<Manifest> DecodeManifest(std::string_view bytes, const std::string& name);

// DecodeManifest for a reader that needs only some chunks: `boxes(key)` are
// the boxes of tensor `key` it reads (nullptr: none); the file names go to
// `files`, as views into `bytes` (the result's `files` stays empty: the
// records' file numbers index `files`). Every chunk is decoded
// and checked as above, but only those that meet one of the boxes in at
// least one element (or differ from them in rank), and empty ones, are kept; the others take
// no memory. `decoded` receives each tensor record's chunk count as stored.
struct ChunkFilter {
  std::function<const std::vector<Box>*(const std::string& key)> boxes;
  std::vector<std::string_view>* files = nullptr;
};
Result<Manifest> DecodeManifest(std::string_view bytes, const std::string& name,
                                const ChunkFilter& keep, std::vector<uint64_t>* decoded);
// Whether `box` meets one of `boxes` in at least one element; true where
// the ranks differ (a shape mismatch the load reports: keep everything).
bool MeetsAny(const std::vector<Box>& boxes, const Box& box);
// A JSON rendering for the CLI (stable key order).
std::string ManifestToJson(const Manifest& m, int indent = 2);

// Save's check of State::metadata_json: empty, or one JSON value in valid
// UTF-8 nested at most 128 deep (so that every reader, Python's json module
// included, can decode it). InvalidArgument saying what is wrong and where.
Status CheckMetadataJson(const std::string& text);

}  // namespace shardpoint::internal_format
