// Part buffers of multipart uploads, recycled across parts, files and saves.
//
// A fresh part_size buffer costs a page fault and a kernel page clear per
// 4 KiB on its first write (about a third of a save's client CPU when every
// upload allocated its own). The pool keeps up to `keep` idle buffers, so a
// storage's next part, file or save writes into pages it already has.
// Buffers are mmap'd with MADV_HUGEPAGE (where the kernel allows it: one
// fault per 2 MiB instead of per 4 KiB for the first use). Thread-safe.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

namespace shardpoint::internal_objstore {

class PartPool {
 public:
  struct Unmap {
    size_t size = 0;
    void operator()(char* p) const;
  };
  using Buffer = std::unique_ptr<char, Unmap>;

  // Buffers of part_size bytes; at most `keep` idle ones are kept.
  PartPool(size_t part_size, int keep) : part_size_(part_size), keep_(keep) {}

  // An idle buffer, else a fresh one (its bytes are unspecified).
  Buffer Take();
  void Give(Buffer buffer);

  size_t part_size() const { return part_size_; }
  // Fresh buffers made so far (tests: recycling keeps this small).
  int allocated() const;

 private:
  const size_t part_size_;
  const int keep_;
  mutable std::mutex mu_;
  std::vector<Buffer> idle_;
  int allocated_ = 0;
};

}  // namespace shardpoint::internal_objstore
