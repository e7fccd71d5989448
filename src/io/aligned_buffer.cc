#include "src/io/aligned_buffer.h"

#include <cstdlib>
#include <new>
#include <utility>

namespace shardpoint::internal_io {

AlignedBuffer::AlignedBuffer(size_t size, size_t alignment) {
  if (size == 0) return;  // no allocation: data() stays null
  // std::aligned_alloc requires the size to be a multiple of the alignment;
  // rounding up also lets O_DIRECT writes cover the whole buffer.
  size_t rounded = (size + alignment - 1) / alignment * alignment;
  data_ = static_cast<char*>(std::aligned_alloc(alignment, rounded));
  if (data_ == nullptr) std::abort();  // no exceptions: out of memory is fatal
  size_ = rounded;
}

AlignedBuffer::~AlignedBuffer() { std::free(data_); }

AlignedBuffer::AlignedBuffer(AlignedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

AlignedBuffer& AlignedBuffer::operator=(AlignedBuffer&& other) noexcept {
  if (this != &other) {
    std::free(data_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

}  // namespace shardpoint::internal_io
