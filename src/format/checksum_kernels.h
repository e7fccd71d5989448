// The XXH3-64 implementations Checksum64 and ChecksumState choose between:
// libxxhash's (built for the x86-64 baseline, SSE2, in Debian's package) and,
// where the CPU has AVX2, the same function compiled for AVX2 here (2.3x the
// throughput on this project's machine: 33 against 14.5 GB/s for 1 MiB). Every
// implementation returns the same values; only the speed differs.
#pragma once

#include <cstddef>
#include <cstdint>

namespace shardpoint::internal_format {

struct ChecksumKernels {
  const char* name;
  uint64_t (*oneshot)(const void* data, size_t n);
  void* (*new_state)();  // reset; nullptr when out of memory
  void (*free_state)(void* state);
  void (*reset)(void* state);
  void (*update)(void* state, const void* data, size_t n);
  uint64_t (*digest)(const void* state);
};

// libxxhash's: runs anywhere.
const ChecksumKernels& BaselineChecksumKernels();
// The AVX2 build; nullptr where this CPU or this build has none.
const ChecksumKernels* Avx2ChecksumKernels();
// The one Checksum64 and ChecksumState use, chosen once per process.
const ChecksumKernels& ActiveChecksumKernels();

}  // namespace shardpoint::internal_format
