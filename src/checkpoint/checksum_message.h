// The save's checksum message: what every rank sends rank 0 after writing its
// data file (Save step 5), so that rank 0 can put checksums in the manifest.
//
//   u64 n, n x u64       checksums of the rank's items, then of its replicas
//   u64 m, m x (u64 k, k x u64)   each item's block checksums (format v2)
//
// Little-endian (src/base/bytes.h). Decoding bounds every count by the bytes
// left before allocating, and names the sending rank in its errors.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "shardpoint/status.h"

namespace shardpoint::internal_checkpoint {

std::string EncodeChecksums(const std::vector<uint64_t>& sums,
                            const std::vector<std::vector<uint64_t>>& blocks);

// `expected`: the number of item and replica checksums rank `rank` must send.
Result<std::vector<uint64_t>> DecodeChecksums(std::string_view bytes, size_t expected, int rank,
                                              std::vector<std::vector<uint64_t>>* blocks);

}  // namespace shardpoint::internal_checkpoint
