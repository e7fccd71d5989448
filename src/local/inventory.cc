#include "src/local/inventory.h"

#include <algorithm>
#include <cstdio>

#include "src/io/path.h"
#include "src/local/replica_map.h"
#include "src/source/manifest_read.h"

using shardpoint::internal_io::JoinPath;

namespace shardpoint::internal_local {

std::string IterDir(int64_t iteration) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "/iter_%07lld", static_cast<long long>(iteration));
  return buf;
}

Result<NodeCopy> ReadNodeCopy(Storage* node, const std::string& dir) {
  NodeCopy copy;
  const std::string path = JoinPath(dir, kReplicaMapName);
  SP_ASSIGN_OR_RETURN(bool exists, node->Exists(path));
  if (!exists) return copy;
  SP_ASSIGN_OR_RETURN(bool manifest, internal_source::HasManifest(node, dir));
  if (!manifest) return copy;
  SP_ASSIGN_OR_RETURN(std::string text, node->ReadFileToString(path));
  SP_ASSIGN_OR_RETURN(ReplicaMap map, DecodeReplicaMap(text, path));
  copy.committed = true;
  for (const auto& [file, nodes] : map.files) {
    copy.all.push_back(file);
    SP_ASSIGN_OR_RETURN(bool here, node->Exists(JoinPath(dir, file)));
    if (here) copy.held.push_back(file);
  }
  return copy;
}

Result<std::vector<int64_t>> IterationDirs(Storage* node) {
  std::vector<int64_t> out;
  SP_ASSIGN_OR_RETURN(bool root, node->IsDirectory("/"));
  if (!root) return out;
  SP_ASSIGN_OR_RETURN(std::vector<std::string> names, node->ListDir("/"));
  for (const std::string& name : names) {
    if (!name.starts_with("iter_") || name.size() < 6 ||
        name.find_first_not_of("0123456789", 5) != std::string::npos || name.size() > 23) {
      continue;
    }
    out.push_back(std::stoll(name.substr(5)));
  }
  std::sort(out.begin(), out.end());
  return out;
}

Result<std::vector<int64_t>> CommittedIterations(Storage* node) {
  std::vector<int64_t> out;
  SP_ASSIGN_OR_RETURN(std::vector<int64_t> all, IterationDirs(node));
  for (int64_t it : all) {
    SP_ASSIGN_OR_RETURN(bool committed, node->Exists(JoinPath(IterDir(it), kReplicaMapName)));
    if (committed) out.push_back(it);
  }
  return out;
}

}  // namespace shardpoint::internal_local
