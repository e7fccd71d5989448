// Reading a small file (a manifest, an index) whole in one request, where a
// request is a round trip (an object store: one GET, whose response gives the
// size), instead of an existence check, a size query and a read.
//
// Internal (no public-header change): a Storage that can do this also
// derives from WholeFileRead; ReadFileIfPresent finds it by dynamic_cast on
// the storage itself (no StorageWrapper is looked through: a wrapper sees
// every read). POSIX and memory storages have none and keep Exists, then
// ReadFileToString.
#pragma once

#include <optional>
#include <string>

#include "shardpoint/storage.h"

namespace shardpoint::internal_io {

class WholeFileRead {
 public:
  virtual ~WholeFileRead() = default;
  // Whether ReadWholeFile reads files under `path` in one request.
  virtual bool ReadsWholeFiles(const std::string& path) = 0;
  // The content of the file at `path`; nullopt if there is none.
  virtual Result<std::optional<std::string>> ReadWholeFile(const std::string& path) = 0;
};

// Whether `storage` reads files under `path` whole in one request.
bool ReadsWholeFiles(Storage* storage, const std::string& path);

// The content of the file at `path`, or nullopt if there is none: one
// ReadWholeFile where the storage has it, else Exists, then ReadFileToString.
Result<std::optional<std::string>> ReadFileIfPresent(Storage* storage, const std::string& path);

}  // namespace shardpoint::internal_io
