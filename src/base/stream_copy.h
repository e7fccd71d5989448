// StreamCopy: memcpy for bytes placed and not read again soon (a load's
// copy into its destination tensors). A large copy writes past the caches
// (non-temporal stores), so the destination's lines are not first read into
// the cache only to be overwritten: on the development VM a verify-and-place
// of 100 MiB per thread took 0.6-0.8x the time of a memcpy's with 1 and 2
// threads. Small copies are plain memcpy.
#pragma once

#include <cstddef>

namespace shardpoint::internal_base {

// Copies from at least this many bytes go past the caches.
inline constexpr size_t kStreamCopyMinBytes = size_t{256} << 10;

// As memcpy(dst, src, n); the ranges must not overlap.
void StreamCopy(void* dst, const void* src, size_t n);

}  // namespace shardpoint::internal_base
