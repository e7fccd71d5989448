// An internal interface of storages that can open an existing file for
// writing without truncating it: its pages stay allocated, and writes go
// over them. The local tier uses it to write a new local checkpoint into the
// tmpfs pages of one that retention removes (src/local/node_storage.h): a
// fresh tmpfs page costs an allocation (about a fifth of a write there).
// Found by dynamic_cast on a Storage; the POSIX storage implements it.
#pragma once

#include <memory>
#include <string>

#include "shardpoint/storage.h"

namespace shardpoint::internal_io {

class OverwriteOpener {
 public:
  virtual ~OverwriteOpener() = default;
  // Opens `path` (created if missing) for buffered writing, keeping its
  // bytes and size: the caller truncates it to what it wrote.
  virtual Result<std::unique_ptr<WritableFile>> OpenForOverwrite(const std::string& path) = 0;
};

}  // namespace shardpoint::internal_io
