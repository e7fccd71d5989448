// Fixed-width hexadecimal text for checksums in messages and JSON.
#pragma once

#include <cstdint>
#include <string>

namespace shardpoint::internal_base {

// 16 lower-case hex digits.
inline std::string Hex16(uint64_t v) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s(16, '0');
  for (int i = 15; i >= 0; --i, v >>= 4) s[i] = kHex[v & 15];
  return s;
}

}  // namespace shardpoint::internal_base
