// Heap bytes that are never zero-filled, reused from one use to the next: a
// std::vector<char> or std::string value-initializes every byte it grows by
// (a memset right before the bytes are overwritten, and first-touch page
// faults of fresh memory on each growth after a shrink). Move-only owner.
// A buffer of 2 MiB or more is backed by transparent huge pages where the
// kernel offers them on request (madvise): one fault per 2 MiB on first
// touch instead of 512, each costly in a VM.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <memory>
#include <utility>

namespace shardpoint::internal_io {

class RawBuffer {
 public:
  RawBuffer() = default;
  RawBuffer(RawBuffer&& other) noexcept { *this = std::move(other); }
  RawBuffer& operator=(RawBuffer&& other) noexcept {
    data_ = std::move(other.data_);
    size_ = std::exchange(other.size_, 0);
    capacity_ = std::exchange(other.capacity_, 0);
    return *this;
  }

  // Makes the buffer n bytes long and returns its memory. The memory is kept
  // where it holds n bytes; else replaced (uninitialized, nothing kept).
  char* Resize(size_t n) {
    if (n > capacity_) {
      data_.reset();
      data_.reset(Allocate(n, &capacity_));
    }
    size_ = n;
    return data_.get();
  }
  char* data() { return data_.get(); }
  const char* data() const { return data_.get(); }
  size_t size() const { return size_; }
  size_t capacity() const { return capacity_; }

 private:
  struct Free {
    void operator()(char* p) const { std::free(p); }
  };
  // At least n bytes (*capacity: how many); aborts when out of memory.
  static char* Allocate(size_t n, size_t* capacity);

  std::unique_ptr<char, Free> data_;
  size_t size_ = 0, capacity_ = 0;
};

// A process-wide shelf of buffers kept from one load to the next (a load's
// I/O threads, and their buffers, are made anew each time): a buffer taken
// from it was touched before, so a read into it faults nothing (a fresh one
// is zeroed by the kernel on first touch, which in a VM whose host took
// freed memory back was 40% of a direct load's CPU). Thread-safe; holds at
// most kMaxShelved buffers of at most kMaxShelvedBytes each (64 MiB).
inline constexpr size_t kMaxShelved = 16;
inline constexpr size_t kMaxShelvedBytes = size_t{4} << 20;
// A buffer of the shelf (of any capacity), or an empty one.
RawBuffer TakeShelved();
// Puts b on the shelf, or frees it where the shelf is full.
void Shelve(RawBuffer b);

}  // namespace shardpoint::internal_io
