// A storage that throws std::bad_alloc from file opens and directory listings
// whose path contains `needle`, as an allocation failing deep inside a step
// would: tests that one rank's exception is every rank's error.
#pragma once

#include <new>
#include <string>
#include <utility>

#include "shardpoint/storage.h"

namespace shardpoint::testing {

class ThrowingStorage : public StorageWrapper {
 public:
  ThrowingStorage(Storage* base, std::string needle)
      : StorageWrapper(base), needle_(std::move(needle)) {}
  Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path,
                                                        const WriteFileOptions& o) override {
    if (path.find(needle_) != std::string::npos) throw std::bad_alloc();
    return StorageWrapper::NewWritableFile(path, o);
  }
  Result<std::unique_ptr<ReadableFile>> NewReadableFile(const std::string& path) override {
    if (path.find(needle_) != std::string::npos) throw std::bad_alloc();
    return StorageWrapper::NewReadableFile(path);
  }
  Result<std::vector<std::string>> ListDir(const std::string& path) override {
    if (path.find(needle_) != std::string::npos) throw std::bad_alloc();
    return StorageWrapper::ListDir(path);
  }

 private:
  const std::string needle_;
};

}  // namespace shardpoint::testing
