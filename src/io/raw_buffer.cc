#include "src/io/raw_buffer.h"

#include <sys/mman.h>

#include <mutex>
#include <vector>

#include "src/io/staging_memory.h"

namespace shardpoint::internal_io {

char* RawBuffer::Allocate(size_t n, size_t* capacity) {
  void* p = nullptr;
  if (n >= kHugePageSize) {
    *capacity = (n + kHugePageSize - 1) / kHugePageSize * kHugePageSize;
    p = std::aligned_alloc(kHugePageSize, *capacity);
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

namespace {
struct Shelf {
  std::mutex mu;
  std::vector<RawBuffer> buffers;
};
Shelf& TheShelf() {
  static Shelf* shelf = new Shelf;  // never destroyed: threads may shelve at exit
  return *shelf;
}
}  // namespace

RawBuffer TakeShelved() {
  Shelf& s = TheShelf();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.buffers.empty()) return RawBuffer();
  RawBuffer b = std::move(s.buffers.back());
  s.buffers.pop_back();
  return b;
}

void Shelve(RawBuffer b) {
  if (b.capacity() == 0 || b.capacity() > kMaxShelvedBytes) return;
  Shelf& s = TheShelf();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.buffers.size() < kMaxShelved) s.buffers.push_back(std::move(b));
}

}  // namespace shardpoint::internal_io
