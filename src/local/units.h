// The verification units of a checkpoint's data files: every byte range the
// manifest holds a checksum for. A chunk with block checksums is one unit
// per block; one without, and an object, are one unit each. What a replica
// or a recovery moves is whole units, each checked before it counts.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "src/format/manifest.h"

namespace shardpoint::internal_local {

struct Unit {
  uint32_t file = 0;
  uint64_t offset = 0;  // absolute, in the file
  uint64_t nbytes = 0;
  uint64_t checksum = 0;
};

struct UnitTable {
  std::vector<Unit> units;         // sorted by (file, offset); disjoint within a file
  std::vector<size_t> file_begin;  // units of file f: [file_begin[f], file_begin[f + 1])
  std::vector<uint64_t> extent;    // per file: the end of its last unit (0 if none)
};

UnitTable UnitsOf(const internal_format::Manifest& m);

// "'<file>' bytes [a, b)": for errors.
std::string UnitName(const internal_format::Manifest& m, const Unit& u);

// Slices of file f for replication: consecutive runs of its units of at
// most `max_bytes` each (at least one unit), the first from byte 0 (the
// file's header goes with it) and each to the end of its last unit. Pairs of
// (first unit index, end unit index) into t.units.
std::vector<std::pair<size_t, size_t>> SlicesOf(const UnitTable& t, uint32_t file,
                                                uint64_t max_bytes);

}  // namespace shardpoint::internal_local
