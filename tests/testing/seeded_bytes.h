// n bytes from a seeded generator: test payloads that differ per seed and are
// the same on every run.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <string>

namespace shardpoint::testing {

inline std::string SeededBytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

}  // namespace shardpoint::testing
