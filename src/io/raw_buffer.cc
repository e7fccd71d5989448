#include "src/io/raw_buffer.h"

#include <sys/mman.h>

namespace shardpoint::internal_io {

char* RawBuffer::Allocate(size_t n, size_t* capacity) {
  constexpr size_t kHuge = size_t{2} << 20;
  void* p = nullptr;
  if (n >= kHuge) {
    *capacity = (n + kHuge - 1) / kHuge * kHuge;
    p = std::aligned_alloc(kHuge, *capacity);
#ifdef MADV_HUGEPAGE
    if (p) (void)madvise(p, *capacity, MADV_HUGEPAGE);  // only a hint: 4 KiB pages else
#endif
  } else {
    *capacity = n;
    p = std::malloc(n > 0 ? n : 1);
  }
  if (p == nullptr) std::abort();  // no exceptions: out of memory is fatal (as AlignedBuffer)
  return static_cast<char*>(p);
}

}  // namespace shardpoint::internal_io
