#include "src/io/read_size.h"

#include <algorithm>

namespace shardpoint::internal_io {

uint64_t PreferredReadBytes(Storage* storage, const std::string& path) {
  while (storage != nullptr) {
    if (auto* p = dynamic_cast<PreferredReadSize*>(storage)) return p->PreferredReadBytes(path);
    auto* w = dynamic_cast<StorageWrapper*>(storage);
    storage = w != nullptr ? w->base() : nullptr;
  }
  return 0;
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
