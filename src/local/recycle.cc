#include "src/local/recycle.h"

#include <algorithm>

#include "src/format/manifest.h"
#include "src/io/path.h"
#include "src/local/inventory.h"
#include "src/local/replica_map.h"
#include "src/source/remove_checkpoint.h"

using shardpoint::internal_format::kDataDir;
using shardpoint::internal_format::kManifestName;
using shardpoint::internal_io::JoinPath;

namespace shardpoint::internal_local {
namespace {

Status RemoveIfThere(Storage* node, const std::string& path) {
  Status s = node->RemoveFile(path);
  return s.ok() || s.code() == StatusCode::kNotFound ? OkStatus() : s;
}

}  // namespace

Result<std::optional<int64_t>> PickRecyclable(Storage* node, int64_t iteration,
                                              const RecyclePolicy& policy) {
  SP_ASSIGN_OR_RETURN(std::vector<int64_t> committed, CommittedIterations(node));
  std::erase(committed, iteration);
  if (committed.empty()) return std::optional<int64_t>();
  const int64_t newest = committed.back();
  // Retention after this save: the newest `keep` of committed + iteration.
  std::vector<int64_t> after = committed;
  after.insert(std::upper_bound(after.begin(), after.end(), iteration), iteration);
  const size_t keep = static_cast<size_t>(std::max(policy.keep, 1));
  const int64_t oldest_kept = after[after.size() > keep ? after.size() - keep : 0];
  SP_ASSIGN_OR_RETURN(std::vector<int64_t> all, IterationDirs(node));
  std::optional<int64_t> pick;
  for (int64_t it : all) {
    if (it >= oldest_kept || it >= newest || it == iteration) continue;
    if (std::find(policy.busy.begin(), policy.busy.end(), it) != policy.busy.end()) continue;
    pick = it;  // ascending: the newest candidate wins
  }
  return pick;
}

Status MoveToSpare(Storage* node, int64_t victim, const std::string& dir) {
  const std::string from = IterDir(victim);
  SP_RETURN_IF_ERROR(RemoveIfThere(node, JoinPath(from, kReplicaMapName)));
  SP_RETURN_IF_ERROR(RemoveIfThere(node, JoinPath(from, kManifestName)));
  SP_ASSIGN_OR_RETURN(bool data, node->IsDirectory(JoinPath(from, kDataDir)));
  if (data)
    SP_RETURN_IF_ERROR(node->Rename(JoinPath(from, kDataDir), JoinPath(dir, kSpareDirName)));
  return internal_source::RemoveCheckpoint(node, from);
}

}  // namespace shardpoint::internal_local
