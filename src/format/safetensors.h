// safetensors headers: encode and decode (defensively, in stages).
//
// A safetensors file is: 8-byte little-endian header length N, N bytes of
// JSON header, then the data region. The header maps tensor names to
// {"dtype", "shape", "data_offsets": [begin, end]} (offsets relative to the
// data region) and may hold "__metadata__": {string: string}. The data
// offsets of all tensors, sorted, must cover [0, data size) contiguously with
// no holes and no overlaps.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "shardpoint/box.h"
#include "shardpoint/dtype.h"
#include "shardpoint/status.h"

namespace shardpoint::internal_format {

inline constexpr uint64_t kMaxSafetensorsHeader = 100'000'000;  // 100 MB, as safetensors

struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::kU8;
  Shape shape;
  uint64_t begin = 0;  // relative to the data region
  uint64_t end = 0;
};

struct SafetensorsHeader {
  std::vector<SafetensorsEntry> entries;  // sorted by (begin, end, name)
  std::map<std::string, std::string> metadata;
  uint64_t data_start = 0;  // 8 + N: file offset of the data region
  uint64_t file_size = 0;
};

// The 8-byte length plus JSON, padded with spaces so that the total length is
// a multiple of `align` (the data region then starts aligned). Entries are
// written in the given order. REQUIRES: offsets consistent (checked by the
// decoder, not here).
std::string EncodeSafetensorsHeader(const std::vector<SafetensorsEntry>& entries,
                                    const std::map<std::string, std::string>& metadata,
                                    size_t align = 8);

// The header of a shardpoint data file (docs/format.md section 2): `entries`
// in file order, offsets relative to the data region, with the metadata
// {"format": "shardpoint", "version": "1"}, padded with spaces so that the
// data region starts 4096-aligned. Every writer of data files uses it, and
// verify compares each file's header with it byte for byte.
std::string EncodeDataFileHeader(const std::vector<SafetensorsEntry>& entries);

// Reads the header length from the first 8 bytes; checks it against
// kMaxSafetensorsHeader and file_size. `file` names the file in errors.
Result<uint64_t> DecodeSafetensorsHeaderLength(std::string_view first8, uint64_t file_size,
                                               const std::string& file);
// Parses and validates the JSON header (`json` is the N bytes after the
// length): dtype names, shapes, offsets in bounds, nbytes == numel * size,
// contiguous coverage of [0, file_size - 8 - N). Errors are DataLoss naming
// `file` and the tensor.
Result<SafetensorsHeader> DecodeSafetensorsHeader(std::string_view json, uint64_t file_size,
                                                  const std::string& file);

// Assigns contiguous data offsets to `entries` in their order (as the
// safetensors writer does) and returns the size of the data region.
// REQUIRES: shapes whose byte sizes do not overflow.
uint64_t AssignSafetensorsOffsets(std::vector<SafetensorsEntry>* entries);

}  // namespace shardpoint::internal_format
