// A storage's preferred read request size: where each request costs a round
// trip and a fee (an object store's ranged GET), loads read in requests of
// at least this many bytes, however small LoadOptions::read_slice_bytes is.
//
// Internal (no public-header change): a Storage that has a preference also
// derives from PreferredReadSize; PreferredReadBytes finds it through
// StorageWrapper layers by dynamic_cast. POSIX and memory storages have none.
#pragma once

#include <cstdint>
#include <string>

#include "shardpoint/storage.h"

namespace shardpoint::internal_io {

class PreferredReadSize {
 public:
  virtual ~PreferredReadSize() = default;
  // The smallest request worth making for files under `path`; 0: no preference.
  virtual uint64_t PreferredReadBytes(const std::string& path) = 0;
};

// `storage`'s preference for `path` (looking through StorageWrapper layers),
// 0 if it has none.
uint64_t PreferredReadBytes(Storage* storage, const std::string& path);

// The read request size a load of `path` uses: read_slice_bytes, raised
// toward the storage's preference, but not above an even share of the
// `bytes` to read among `threads` I/O threads (rounded up to whole MiB): a
// rank loading 32 MiB on 4 threads makes 4 GETs of 8 MiB in parallel, not 2
// of 16. bytes 0: no cap.
uint64_t ReadSliceFor(Storage* storage, const std::string& path, uint64_t read_slice_bytes,
                      uint64_t bytes = 0, int threads = 1);

}  // namespace shardpoint::internal_io
