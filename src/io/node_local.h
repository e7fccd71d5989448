// Marking a Storage whose files each node sees alone: the local tier's
// RootedStorage (src/local/node_storage.h) gives every node's ranks the same
// paths but each node its own memory. A file one rank writes there is not
// visible to the ranks of other nodes, so a save's commit must keep every
// part of the manifest where rank 0 writes it (src/checkpoint/owner_commit.h:
// the keys' owners send their records instead of writing their shards).
//
// Internal (no public-header change): such a Storage also derives from
// NodeLocal; IsNodeLocal finds it through StorageWrapper layers.
#pragma once

#include "shardpoint/storage.h"
#include "src/io/storage_facet.h"

namespace shardpoint::internal_io {

class NodeLocal {
 public:
  virtual ~NodeLocal() = default;
};

inline bool IsNodeLocal(Storage* storage) { return FindFacet<NodeLocal>(storage) != nullptr; }

}  // namespace shardpoint::internal_io
