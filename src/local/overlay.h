// The files a recovery load reads: each data file of the local checkpoint
// is this node's copy (where the node holds it) with the units received
// from peers or read from persistent storage laid over it (all verified
// before they were kept). Bytes neither holds read as zeros: the load
// verifies every block it places, so such a byte is never loaded (a
// DataLoss error names it), and the reader reads whole blocks only.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "shardpoint/storage.h"

namespace shardpoint::internal_local {

struct OverlayFiles {
  std::string dir;                 // the directory paths name ("/iter_...")
  std::vector<std::string> names;  // manifest file names
  std::vector<char> held;          // per file: the node's copy exists
  std::vector<uint64_t> extent;    // per file: its size where not held
  // Per file: offset -> verified bytes of one unit, in memory its owner
  // keeps while the overlay is used.
  std::vector<std::map<uint64_t, std::string_view>> units;
};

// NewReadableFile("<dir>/<name>") opens the overlay of that file; every
// other call goes to `node`. `files` must outlive it and not change while
// it is used.
class OverlayStorage : public StorageWrapper {
 public:
  OverlayStorage(Storage* node, const OverlayFiles* files) : StorageWrapper(node), files_(files) {}
  Result<std::unique_ptr<ReadableFile>> NewReadableFile(const std::string& path) override;

 private:
  const OverlayFiles* files_;
};

}  // namespace shardpoint::internal_local
