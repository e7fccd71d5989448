#include "src/io/read_size.h"

#include <algorithm>

#include "src/io/storage_facet.h"

namespace shardpoint::internal_io {

uint64_t PreferredReadBytes(Storage* storage, const std::string& path) {
  PreferredReadSize* p = FindFacet<PreferredReadSize>(storage);
  return p != nullptr ? p->PreferredReadBytes(path) : 0;
}

uint64_t ReadSliceFor(Storage* storage, const std::string& path, uint64_t read_slice_bytes,
                      uint64_t bytes, int threads) {
  uint64_t preferred = PreferredReadBytes(storage, path);
  if (bytes > 0 && preferred > 0) {
    constexpr uint64_t kMiB = uint64_t{1} << 20;
    const uint64_t per_thread = bytes / static_cast<uint64_t>(std::max(1, threads));
    const uint64_t share = (per_thread + kMiB - 1) / kMiB * kMiB;
    preferred = std::min(preferred, std::max(share, kMiB));
  }
  return std::max(read_slice_bytes, preferred);
}

}  // namespace shardpoint::internal_io
