// Heap bytes that are never zero-filled, reused from one use to the next: a
// std::vector<char> or std::string value-initializes every byte it grows by
// (a memset right before the bytes are overwritten, and first-touch page
// faults of fresh memory on each growth after a shrink). Move-only owner.
#pragma once

#include <cstddef>
#include <memory>

namespace shardpoint::internal_io {

class RawBuffer {
 public:
  // Makes the buffer n bytes long and returns its memory. The memory is kept
  // where it holds n bytes; else replaced (uninitialized, nothing kept).
  char* Resize(size_t n) {
    if (n > capacity_) {
      data_.reset(new char[n]);  // default-initialized: no fill
      capacity_ = n;
    }
    size_ = n;
    return data_.get();
  }
  char* data() { return data_.get(); }
  const char* data() const { return data_.get(); }
  size_t size() const { return size_; }
  size_t capacity() const { return capacity_; }

 private:
  std::unique_ptr<char[]> data_;
  size_t size_ = 0, capacity_ = 0;
};

}  // namespace shardpoint::internal_io
