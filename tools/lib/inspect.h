// The text of `shardpoint inspect` and `shardpoint verify`: pure functions
// from a manifest or report to what the CLI prints.
#pragma once

#include <cstdint>
#include <string>

#include "src/checkpoint/verify.h"
#include "src/format/manifest.h"

namespace shardpoint::tools {

// "1.50 GiB", "512 B".
std::string HumanBytes(uint64_t n);
// A table: key, dtype, global shape, chunks, bytes; then totals.
std::string InspectTable(const internal::Manifest& m, const std::string& dir);
// The verify report; ends with "OK" or "FAILED: N fault(s)".
std::string VerifyText(const internal::VerifyReport& r, const std::string& dir, double seconds);

}  // namespace shardpoint::tools
