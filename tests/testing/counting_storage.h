// A forwarding storage that counts the read requests (ReadAt calls) and bytes
// of every file opened through it: tests that assert how much a load reads.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "shardpoint/storage.h"

namespace shardpoint::testing {

class CountingStorage : public StorageWrapper {
 public:
  explicit CountingStorage(Storage* base) : StorageWrapper(base) {}
  std::atomic<uint64_t> reads{0}, bytes{0};

  Result<std::unique_ptr<ReadableFile>> NewReadableFile(const std::string& p) override {
    SP_ASSIGN_OR_RETURN(std::unique_ptr<ReadableFile> f, base()->NewReadableFile(p));
    return std::unique_ptr<ReadableFile>(new File(std::move(f), this));
  }

 private:
  class File : public ReadableFileWrapper {
   public:
    File(std::unique_ptr<ReadableFile> f, CountingStorage* s)
        : ReadableFileWrapper(std::move(f)), s_(s) {}
    Status ReadAt(uint64_t offset, size_t n, void* dst) const override {
      s_->reads.fetch_add(1);
      s_->bytes.fetch_add(n);
      return ReadableFileWrapper::ReadAt(offset, n, dst);
    }

   private:
    CountingStorage* s_;
  };
};

}  // namespace shardpoint::testing
