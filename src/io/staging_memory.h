// Staging memory for async saves: anonymous pages mapped in 2 MiB-aligned
// extents, with transparent huge pages requested (madvise MADV_HUGEPAGE)
// where the kernel offers them, optionally faulted in up front so the first
// copy into it costs no page faults. Move-only owner; unmapped on destruction.
#pragma once

#include <cstddef>

#include "shardpoint/status.h"

namespace shardpoint::internal_io {

inline constexpr size_t kHugePageSize = size_t{2} << 20;

class StagingMemory {
 public:
  StagingMemory() = default;
  // Maps at least `size` bytes (rounded up to 2 MiB). With `huge_pages`,
  // asks the kernel for transparent huge pages (huge_pages() says whether it
  // accepted). With `prefault`, writes every page now. IOError if the
  // mapping fails; size 0 maps nothing.
  static Result<StagingMemory> Map(size_t size, bool huge_pages, bool prefault);
  ~StagingMemory();
  StagingMemory(StagingMemory&& other) noexcept;
  StagingMemory& operator=(StagingMemory&& other) noexcept;
  StagingMemory(const StagingMemory&) = delete;
  StagingMemory& operator=(const StagingMemory&) = delete;

  char* data() { return data_; }
  size_t size() const { return size_; }
  bool huge_pages() const { return huge_pages_; }

 private:
  char* data_ = nullptr;
  size_t size_ = 0;
  bool huge_pages_ = false;
};

}  // namespace shardpoint::internal_io
