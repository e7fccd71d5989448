// The replica map of a local checkpoint, `<local_root>/iter_<N>/replicas`:
// which nodes hold which data files. Text, one line per data file:
//
//   shardpoint-local-replicas 1
//   data/0.safetensors<TAB>node-a<TAB>node-b
//
// (the file's own node first, then its replicas in placement order). Every
// node writes the same map, and writes it last: a node's copy of a local
// checkpoint counts only once its map exists (the node's commit point).
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "shardpoint/status.h"

namespace shardpoint::internal_local {

inline constexpr char kReplicaMapName[] = "replicas";

struct ReplicaMap {
  // (data file name, node ids holding it), in manifest file order.
  std::vector<std::pair<std::string, std::vector<std::string>>> files;
};

std::string EncodeReplicaMap(const ReplicaMap& map);
// DataLoss naming `name` and the line for anything malformed.
Result<ReplicaMap> DecodeReplicaMap(std::string_view text, const std::string& name);

}  // namespace shardpoint::internal_local
