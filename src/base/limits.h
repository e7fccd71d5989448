// Limits every encoding and decoder of shapes shares.
#pragma once

#include <cstddef>
#include <cstdint>

namespace shardpoint::internal_base {

// The largest rank a shape may have anywhere (manifest, plan exchange,
// cooperative pieces, DCP metadata): encodings store the rank in one byte.
inline constexpr size_t kMaxRank = 32;

// The longest string an encoding with a 32-bit length prefix can carry.
inline constexpr uint64_t kMaxStrBytes = UINT32_MAX;

}  // namespace shardpoint::internal_base
