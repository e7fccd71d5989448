// What a node holds of the local tier, as its first rank finds it in its
// local root: the committed local checkpoints (those with a replica map,
// replica_map.h) and, of each, the data files the map lists that exist.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "shardpoint/storage.h"

namespace shardpoint::internal_local {

struct NodeCopy {
  bool committed = false;         // the replica map exists and decodes
  std::vector<std::string> all;   // every data file the map lists
  std::vector<std::string> held;  // those of them present on this node
};

// `dir`: "/iter_..." on the node storage.
Result<NodeCopy> ReadNodeCopy(Storage* node, const std::string& dir);

// Iterations with a directory under the node's root (committed or not),
// ascending.
Result<std::vector<int64_t>> IterationDirs(Storage* node);

// Iterations under the node's root with a replica map, ascending.
Result<std::vector<int64_t>> CommittedIterations(Storage* node);

// "/iter_0000100"
std::string IterDir(int64_t iteration);

}  // namespace shardpoint::internal_local
