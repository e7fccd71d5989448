// A reader for the directory of an uncompressed ("stored") zip archive: the
// container torch.save writes, which DCP embeds as one item of a .distcp
// file. It reads only the end records, the central directory and the local
// headers, never the entries' data, so a caller can read just the byte
// ranges it needs.
//
// Read: the end of central directory record (no archive comment), the zip64
// end record and locator (torch always writes them), central directory
// headers with zip64 extra fields, local headers. Refused: compression,
// encryption, multi-disk archives, an archive comment, entries or records
// outside the archive or overlapping its central directory, names twice.
// Errors are DataLoss (malformed) or FailedPrecondition (well-formed but not
// read here), naming `what` and the byte offset.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "shardpoint/status.h"

namespace shardpoint::internal_dcp {

struct ZipEntry {
  std::string name;
  uint64_t data_offset = 0;  // of the entry's bytes, from the start of the archive
  uint64_t size = 0;
  uint32_t crc32 = 0;  // as recorded in the central directory
};

// Reads `n` bytes at `offset` of the archive (offset + n <= archive size).
using ZipReadAt = std::function<Status(uint64_t offset, size_t n, char* dst)>;

// The largest central directory read (a torch.save archive has a handful of
// entries).
inline constexpr uint64_t kMaxZipDirectoryBytes = uint64_t{16} << 20;

// The entries of the archive of `size` bytes, in central directory order.
Result<std::vector<ZipEntry>> ReadZipDirectory(uint64_t size, const ZipReadAt& read,
                                               const std::string& what);

// CRC-32 (IEEE, as zip uses), continued from `crc` (0 to start).
uint32_t Crc32(uint32_t crc, const char* data, size_t n);
// The CRC-32 of A followed by B, from crc_a, crc_b and B's length (so blocks
// checksummed in parallel give the checksum of the whole).
uint32_t Crc32Combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b);

}  // namespace shardpoint::internal_dcp
