// A ReadableFile facet: a file whose bytes are already in memory (a
// recovery's overlay of verified units, held in mappings and messages), so
// that a reader can take them where they lie instead of having ReadAt copy
// them into its staging first.
#pragma once

#include <cstddef>
#include <cstdint>

namespace shardpoint::internal_io {

class MemoryView {
 public:
  virtual ~MemoryView() = default;
  // Where bytes [offset, offset + n) lie, contiguous and valid while the
  // file is; null where they are not all in memory in one piece (ReadAt
  // then reads them).
  virtual const char* View(uint64_t offset, size_t n) const = 0;
};

}  // namespace shardpoint::internal_io
