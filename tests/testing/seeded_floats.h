// Seeded float data for tests: n values from a linear congruential generator,
// different for every seed, reproducible, every value finite and exact.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace shardpoint::testing {

inline std::vector<float> SeededFloats(uint32_t seed, size_t n) {
  std::vector<float> v(n);
  uint32_t x = 2654435761u * (seed + 1);
  for (float& f : v) {
    x = x * 1664525u + 1013904223u;
    f = static_cast<float>(x >> 8);
  }
  return v;
}

}  // namespace shardpoint::testing
