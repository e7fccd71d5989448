// Removing what crashed writers left invisible under a directory.
//
// On an object store a file being written is a multipart upload: its parts
// are stored but no object exists until it is completed. A writer killed
// before that (a crashed save) leaves the upload open, its parts kept and
// billed, invisible to listings and to RemoveAll. AbortAbandonedWrites(dir)
// aborts every such upload under `dir`. The caller guarantees that none of
// its own job's writes under `dir` is still open: at a commit (every file of
// the save is complete before the manifest's PUT) or under the manager's lock
// before any save. A racing writer's upload is aborted too; its save fails,
// as it would at its own commit.
//
// Internal (no public-header change): a Storage that has such writes also
// derives from AbandonedWrites; FindAbandonedWrites finds it through
// StorageWrapper layers. POSIX and memory storages have none (a crashed
// save's files are visible and removed as files).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "shardpoint/storage.h"

namespace shardpoint::internal_io {

class AbandonedWrites {
 public:
  virtual ~AbandonedWrites() = default;
  // Those under `dir` whose path relative to it `which` accepts (all where
  // it is empty). How many were aborted, or the first failure naming its
  // object (all are tried). Under a bucket's root nothing is aborted (0).
  using Which = std::function<bool(const std::string& relative)>;
  virtual Result<uint64_t> AbortAbandonedWrites(const std::string& dir, const Which& which) = 0;
};

// `storage`'s AbandonedWrites (through StorageWrapper layers), or null.
AbandonedWrites* FindAbandonedWrites(Storage* storage);

// Best effort where it is cleanup: aborts them if `storage` can have any and
// returns what failed ("" if nothing did: "aborting the uploads a crashed
// writer left open under '<dir>' failed (a bucket lifecycle rule removes
// them): <error>"), never an error.
std::string AbortAbandonedWritesUnder(Storage* storage, const std::string& dir,
                                      const AbandonedWrites::Which& which = nullptr);

}  // namespace shardpoint::internal_io
