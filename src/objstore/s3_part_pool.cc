#include "src/objstore/s3_part_pool.h"

#include <sys/mman.h>

#include <new>

namespace shardpoint::internal_objstore {

void PartPool::Unmap::operator()(char* p) const {
  if (p != nullptr) munmap(p, size);
}

PartPool::Buffer PartPool::Take() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!idle_.empty()) {
      Buffer b = std::move(idle_.back());
      idle_.pop_back();
      return b;
    }
    ++allocated_;
  }
  void* p = mmap(nullptr, part_size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
  if (part_size_ >= (size_t{2} << 20)) madvise(p, part_size_, MADV_HUGEPAGE);  // a hint only
#endif
  return Buffer(static_cast<char*>(p), Unmap{part_size_});
}

void PartPool::Give(Buffer buffer) {
  if (buffer == nullptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (static_cast<int>(idle_.size()) < keep_) idle_.push_back(std::move(buffer));
}

int PartPool::allocated() const {
  std::lock_guard<std::mutex> lock(mu_);
  return allocated_;
}

}  // namespace shardpoint::internal_objstore
