// The manifest: the index of a checkpoint (format v1, docs/format.md).
//
// Binary, little-endian, with a trailing checksum. EncodeManifest and
// DecodeManifest are inverses; DecodeManifest validates every size, offset
// and count before use (untrusted input) and errors are DataLoss.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "shardpoint/box.h"
#include "shardpoint/dtype.h"
#include "shardpoint/status.h"

namespace shardpoint::internal {

inline constexpr uint32_t kFormatVersion = 1;
inline constexpr char kManifestName[] = "manifest";
inline constexpr char kDataDir[] = "data";

struct ChunkRecord {
  Box box;                // in the global tensor
  uint32_t file = 0;      // index into Manifest::files
  uint64_t offset = 0;    // absolute byte offset in the file
  uint64_t nbytes = 0;    // == box.num_elements() * DTypeSize(dtype)
  uint64_t checksum = 0;  // Checksum64 of the chunk's bytes
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
  uint32_t version = kFormatVersion;
  std::vector<std::string> files;     // relative to the checkpoint dir, e.g. "data/0.safetensors"
  std::vector<TensorRecord> tensors;  // sorted by key, keys unique
  std::vector<ObjectRecord> objects;  // sorted by (key, index)
  bool has_common = false;
  std::string common;         // the common blob
  std::string metadata_json;  // user metadata

  // Index of the tensor with `key`, or -1 (binary search).
  int64_t FindTensor(std::string_view key) const;
};

std::string EncodeManifest(const Manifest& m);
// Validates structure: magic, version, counts, bounds, sorted unique keys,
// chunk boxes inside their tensor with nbytes consistent, file indices valid,
// file names relative without ".." or "/" beyond "data/". `name` names the
// file in errors.
Result<Manifest> DecodeManifest(std::string_view bytes, const std::string& name);
// A JSON rendering for the CLI (stable key order).
std::string ManifestToJson(const Manifest& m, int indent = 2);

}  // namespace shardpoint::internal
