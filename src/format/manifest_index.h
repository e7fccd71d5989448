// The manifest of formats v3 to v6: a small index (the file `manifest`, the
// commit point) and manifest shards (back to back in `data/manifest.shards`;
// v6: in the shard files the index names, e.g. one per owner rank), so that
// a loading rank reads and decodes only the records of the keys it needs
// (docs/format.md section 3.2), and from v4 on only the parts of a large
// record whose chunks overlap its boxes.
//
// The index holds every tensor's and object's skeleton (key, dtype, shape or
// index and grid) with the shards that hold its record, each shard's size
// and checksum, the common blob and the user metadata. A shard is an
// ordinary v2 manifest (same encoding, DecodeManifest validates it) holding
// the records of its keys and only the files they name, with no common blob
// and no metadata. v4: a record larger than the shard size is cut into parts
// (runs of its chunks in box order, each in a shard of its own); the index
// lists each part's shard, chunk count and span (the bounding box of its
// chunks), so a rank reads only the parts whose span meets its boxes.
//
// SplitManifest and MergeShards are inverses up to the order of the file
// list: MergeShards numbers files by first use (shard order, tensors before
// objects), and SplitManifest's CanonicalFileOrder gives that order, so
// MergeShards(SplitManifest(m)) == CanonicalFileOrder(m) (files no record
// names are dropped).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "src/format/manifest.h"

namespace shardpoint::internal_format {

// v6 (v5 with shards in several files) is written; v3 (one record, one
// shard), v4 (parts of large records, one entry per object) and v5 (objects
// as runs), all with every shard in kShardsFile, are read.
inline constexpr uint32_t kIndexVersion = 6;
inline constexpr uint32_t kIndexVersionV5 = 5;
inline constexpr uint32_t kIndexVersionV4 = 4;
inline constexpr uint32_t kIndexVersionV3 = 3;
inline bool IsIndexVersion(uint32_t v) { return v >= kIndexVersionV3 && v <= kIndexVersion; }
// An index holds at most this many objects: a v5 run names up to 2^63 of
// them in 29 bytes, and every rank may build a skeleton of each.
inline constexpr uint64_t kMaxIndexObjects = uint64_t{1} << 24;
// In data/, so that everything that clears a failed save's data clears it
// too; written and made durable with the data files, before the index.
inline constexpr char kShardsFile[] = "data/manifest.shards";
// v6 names each shards file by the rank that wrote it: data/manifest.<rank>.shards,
// or kMainShards for kShardsFile (rank 0's, and the only one before v6).
inline constexpr uint32_t kMainShards = 0xFFFFFFFF;
// "data/manifest.<writer>.shards", or kShardsFile for kMainShards.
std::string ShardFileName(uint32_t writer);
// Shards are cut at record boundaries once they reach this many bytes; a
// record larger than it gets shards of its own, one per part of about
// kDefaultPartBytes (v4). Measured at 65,536 saving ranks
// (bench/results/plan_scale_2026-11-28.md): 64 KiB shards made a loading
// rank read ~5 MB of other keys' records around its small keys; 8 KiB
// parts cost the index ~44 bytes each (5.4 MB for a 358 MB manifest) and
// cut a rank's reads to ~4 MB, 4 KiB parts to ~2 MB for an 8.3 MB index.
inline constexpr uint64_t kDefaultShardBytes = uint64_t{8} << 10;
inline constexpr uint64_t kDefaultPartBytes = uint64_t{8} << 10;

struct ShardRef {
  uint64_t nbytes = 0;    // its size
  uint64_t checksum = 0;  // Checksum64 of its bytes
  uint32_t file = 0;      // its file: an index into ManifestIndex::shard_files
  // In that file: the sum of the sizes of the lower-numbered shards of the
  // same file, which lie back to back in shard order (not encoded).
  uint64_t offset = 0;
};

// A run of a tensor's chunks (in box order) held by one shard.
struct TensorPart {
  uint32_t shard = 0;
  uint64_t num_chunks = 0;
};

struct TensorEntry {
  std::string key;
  DType dtype = DType::kF32;
  Shape shape;
  std::vector<TensorPart> parts;  // at least one; in chunk order
  // The parts' spans (the bounding box of each part's chunks), flat: per
  // part its R offsets then its R extents, as the index encodes them; empty
  // when there is one part (its span is the whole tensor). One allocation per
  // tensor, not two per part: 49,641 parts at 65,536 ranks.
  std::vector<int64_t> spans;
  uint64_t num_chunks() const;
  // Part `p`'s span.
  Box span(size_t p) const;
  // Appends a part of `n` chunks in `shard` with bounding box `box`.
  void AddPart(uint32_t shard, uint64_t n, const Box& box);
};

// Objects as runs: objects of one key and grid, in one shard, whose indices
// follow each other in row-major order, so that the 65,536 RNG objects of as
// many ranks are a few hundred runs, not 65,536 entries of two heap vectors
// each. Version 5 encodes the runs (docs/format.md section 3.2); versions 3
// and 4 list every object, and decoding gathers them into runs.
struct ObjectRun {
  std::string key;
  Shape grid;
  Shape first;  // the first object's index (empty when the grid is)
  Shape last;   // the last one's
  uint64_t count = 0;
  uint32_t shard = 0;
};
// The index after `index` in row-major order inside `grid` (false past the end).
bool NextIndex(const Shape& grid, Shape* index);

struct ManifestIndex {
  // 3: one part per tensor; 3 and 4: one entry per object (EncodeIndex
  // writes what the version says).
  uint32_t version = kIndexVersion;
  uint64_t block_size = kDefaultBlockSize;
  // The files holding the shards, by writer (ShardFileName), strictly
  // increasing (kMainShards last), each holding at least one shard (so empty
  // when there is no shard). v6 encodes it, 4 bytes a file (not the names:
  // 31,487 owners' files at 65,536 ranks of the MoE model); v3 to v5 decode
  // to {kMainShards} (with a shard).
  std::vector<uint32_t> shard_files;
  std::vector<ShardRef> shards;
  std::vector<TensorEntry> tensors;  // sorted by key, unique
  std::vector<ObjectRun> objects;    // sorted by (key, index), unique
  uint64_t num_objects() const;
  // Appends the object (`key`, `index`, `grid`) in `shard` after the last:
  // to the last run where it follows it, else as a new run.
  void AddObject(const std::string& key, const Shape& index, const Shape& grid, uint32_t shard);
  bool has_common = false;
  std::string common;
  std::string metadata_json;
  // A loading rank's decode (DecodeIndex with an IndexKeep): `tensors` holds
  // only the entries of the kept keys, though every entry was checked;
  // `tensor_count` is the index's number of tensors, `tensor_numbers[i]`
  // tensors[i]'s number among them (its position in key order), and
  // `owned_keys` the (number, key) of each tensor whose number is
  // IndexKeep::owner mod IndexKeep::owners. EncodeIndex refuses it.
  bool partial = false;
  uint64_t tensor_count = 0;
  std::vector<uint64_t> tensor_numbers;
  std::vector<std::pair<uint64_t, std::string>> owned_keys;
};

// What a loading rank keeps of an index (DecodeIndex): the entries of its
// own keys, not a skeleton of each of the index's tensors (42,572 of them,
// 14 MB of fresh heap, at 65,536 ranks of the MoE bench model), and the keys
// it owns in the load's request check (src/checkpoint/requests.h).
struct IndexKeep {
  const std::vector<std::string>* keys = nullptr;  // sorted, unique
  uint64_t owners = 1;
  uint64_t owner = 0;
};

// The version field of encoded manifest or index bytes (0 if too short).
uint32_t EncodedVersion(std::string_view bytes);

// "<dir>/<its shard file> shard <s> (bytes [a, b))", the bytes in that file:
// errors name a shard so.
std::string ShardName(const ManifestIndex& index, uint32_t s, const std::string& dir);

// `m` with its files numbered by first use (see above).
Manifest CanonicalFileOrder(const Manifest& m);

struct SplitResult {
  ManifestIndex index;
  std::vector<std::string> shards;  // encoded; `file` is their concatenation
};
// Cuts `m` (a v2 manifest: block checksums) into shards of about
// `shard_bytes` each, tensors and objects in key order; a tensor record
// larger than `shard_bytes` into parts of about `part_bytes` (at least one
// chunk each). The result's version is kIndexVersion, every shard in
// the shards file of `writer`: shard_files is {writer} (empty when `m` has no
// record, so no shard).
SplitResult SplitManifest(const Manifest& m, uint64_t shard_bytes = kDefaultShardBytes,
                          uint64_t part_bytes = kDefaultPartBytes, uint32_t writer = kMainShards);

// One index from indexes of disjoint key sets, each a v6 non-partial index
// with shard files of its own (e.g. one per owner rank, SplitManifest of its
// keys into data/manifest.<rank>.shards): version kIndexVersion, the shard
// files in increasing order, part p's shard s renumbered to (the shards of
// the parts before p) + s (its file to its place; offsets in a file are
// unchanged),
// tensor entries in key order and object runs in (key, index) order (runs of
// different parts stay separate runs). So a shard may hold keys that are not
// adjacent in key order; DecodeIndex, the Shards* functions and MergeShards
// take that. has_common, common and metadata_json are left empty for the
// caller. InternalError on a key or object in two parts, a shard file in two
// parts, block sizes that differ, or a part that is partial, not v6 or whose
// shards and files do not match (a file out of range or holding no shard).
Result<ManifestIndex> CombineIndexes(std::vector<ManifestIndex> parts);

// Writes index.version's layout (3: every tensor must have one part).
// REQUIRES: !index.partial; below v6, shard_files empty or {kMainShards}
// and every shard in file 0 (aborts otherwise).
std::string EncodeIndex(const ManifestIndex& index);
// Versions 3 to 6. Validates as DecodeManifest does (counts bounded before
// use, sorted unique keys, shard numbers in range, parts in shards of their
// own with spans inside the tensor; v5 object runs inside their grid, after
// each other, at most kMaxIndexObjects objects, and no more of them in a
// shard than its size can hold; v6 shard files named data/<name>, <name> of
// [A-Za-z0-9._-] and not . or .., unique, each holding a shard); DataLoss
// naming `name`. With `keep`, every entry is checked alike but only the kept
// tensors' are built (partial).
Result<ManifestIndex> DecodeIndex(std::string_view bytes, const std::string& name,
                                  const IndexKeep* keep = nullptr);

// The shards that hold the records of `tensor_keys` and `object_keys`
// (sorted, unique), every part. Keys the index does not hold are skipped.
std::vector<uint32_t> ShardsForKeys(const ManifestIndex& index,
                                    const std::vector<std::string>& tensor_keys,
                                    const std::vector<std::string>& object_keys);

// A tensor key and the boxes of it a rank needs.
struct KeyBoxes {
  std::string key;
  std::vector<Box> boxes;
};
// An object a rank loads.
struct ObjectAt {
  std::string key;
  Shape index;
};
// The shards holding the parts of each key whose span meets one of its boxes
// in at least one element (a key's only part always), and the run of each
// object in `objects` (one shard each, not every run of its key); sorted,
// unique. The merged record then holds every chunk that overlaps those boxes.
std::vector<uint32_t> ShardsForBoxes(const ManifestIndex& index,
                                     const std::vector<KeyBoxes>& tensors,
                                     const std::vector<ObjectAt>& objects);

// A manifest from the index and the bytes of some of its shards (`have`:
// shard number -> bytes; the others are not read). Checks each shard's size
// and checksum against the index and that it holds exactly the records (or
// parts, with their chunk counts, chunks inside their spans) the index
// assigns to it. The result's version is the index's (EncodeManifest writes
// it as a version 2 manifest). Tensors and objects of shards not given keep
// their skeleton (no chunks; object location 0), a tensor with some parts
// given the chunks of those parts, so every rank sees the same tensor and
// object numbering. `dir` names the files in errors.
// `index` is taken (moved from where the caller has no further use: every
// rank builds every key's skeleton from it, 65,536 objects at 65,536 ranks).
// `keep` (optional, a loading rank's own boxes): only the chunks that meet
// one of its boxes for their key are kept (DecodeManifest's ChunkFilter),
// and only the objects of the shards given (no skeletons: the load numbers
// objects by key, ObjectKeys); every record is still checked against the
// index, its chunk count included, and every kept chunk against its part's
// span and order.
// Every object key of the index, sorted, unique.
std::vector<std::string> ObjectKeys(const ManifestIndex& index);

// Of a partial index (DecodeIndex with an IndexKeep), only its tensors are
// built, and the records of other keys in the shards given are passed over
// unchecked (the ranks that keep them check them). `chunk_records`
// (optional) receives the number of chunk records in the shards given.
Result<Manifest> MergeShards(ManifestIndex index,
                             const std::vector<std::pair<uint32_t, std::string>>& have,
                             const std::string& dir, const std::vector<KeyBoxes>* keep = nullptr,
                             uint64_t* chunk_records = nullptr);

}  // namespace shardpoint::internal_format
