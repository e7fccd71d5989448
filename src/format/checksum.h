// Chunk checksums: XXH3-64, seed 0 (libxxhash, or its AVX2 build where the
// CPU has it: checksum_kernels.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace shardpoint::internal_format {

uint64_t Checksum64(const void* data, size_t n);

// Streaming form: Update() in pieces gives the same value as Checksum64 over
// the concatenation. Not thread-safe.
class ChecksumState {
 public:
  ChecksumState();
  ~ChecksumState();
  ChecksumState(ChecksumState&&) noexcept;
  ChecksumState& operator=(ChecksumState&&) noexcept;
  void Reset();
  void Update(const void* data, size_t n);
  uint64_t Digest() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace shardpoint::internal_format
