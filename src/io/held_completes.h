// Holding a save's data files invisible until its directory is checked.
//
// On an object store a data file becomes visible (and overwrites what is at
// its key) only when its upload is completed. A save there checks its
// directory (one LIST: a checkpoint there already? a crashed save's data to
// remove?) while the ranks upload, and completes nothing until the verdict:
// HoldCompletes(dir) makes every later Sync of a file under `dir` send its
// data but not complete it; ReleaseCompletes completes (or aborts) them all.
//
// Internal (no public-header change): a Storage that can hold also derives
// from HeldCompletes; FindHeldCompletes finds it through StorageWrapper layers
// by dynamic_cast. POSIX and memory storages cannot (their files are visible
// as written; their saves commit by rename).
#pragma once

#include <string>

#include "shardpoint/storage.h"

namespace shardpoint::internal_io {

class HeldCompletes {
 public:
  virtual ~HeldCompletes() = default;
  // From now until a matching ReleaseCompletes, Sync of a file under `dir`
  // sends its bytes and returns, the object not yet visible. Counted: each
  // caller (a thread rank sharing the storage) holds and releases once.
  virtual void HoldCompletes(const std::string& dir) = 0;
  // Ends one hold of `dir` and completes (complete: true) or aborts every
  // file held under it so far, in parallel. The first failure, naming its
  // object; all are tried.
  virtual Status ReleaseCompletes(const std::string& dir, bool complete) = 0;
};

// `storage`'s HeldCompletes for `path` (through StorageWrapper layers), or
// null if it cannot hold.
HeldCompletes* FindHeldCompletes(Storage* storage, const std::string& path);

}  // namespace shardpoint::internal_io
