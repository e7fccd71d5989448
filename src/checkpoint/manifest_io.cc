#include "src/checkpoint/manifest_io.h"

#include <mutex>

#include "src/io/path.h"

using shardpoint::internal_format::EncodeIndex;
using shardpoint::internal_format::EncodeManifest;
using shardpoint::internal_format::Manifest;
using shardpoint::internal_format::ShardFileName;
using shardpoint::internal_format::SplitManifest;
using shardpoint::internal_format::SplitResult;
using shardpoint::internal_io::JoinPath;

namespace shardpoint::internal_checkpoint {
namespace {

std::mutex sharding_mu;
ManifestSharding sharding;

}  // namespace

ManifestSharding GetManifestSharding() {
  std::lock_guard<std::mutex> l(sharding_mu);
  return sharding;
}

void SetManifestSharding(const ManifestSharding& s) {
  std::lock_guard<std::mutex> l(sharding_mu);
  sharding = s;
}

Result<std::string> WriteManifestShards(Storage* storage, const std::string& w, const Manifest& m) {
  const ManifestSharding s = GetManifestSharding();
  std::string whole = EncodeManifest(m);
  if (whole.size() <= s.threshold || m.version < 2) return whole;
  whole.clear();
  const SplitResult split = SplitManifest(m, s.shard_bytes, s.part_bytes);
  SP_RETURN_IF_ERROR(WriteShardFile(storage, w, split));
  return EncodeIndex(split.index);
}

Status WriteShardFile(Storage* storage, const std::string& w, const SplitResult& split) {
  if (split.index.shard_files.empty()) return OkStatus();
  const std::string file = ShardFileName(split.index.shard_files[0]);
  std::string all;
  all.reserve(split.index.shards.empty()
                  ? 0
                  : split.index.shards.back().offset + split.index.shards.back().nbytes);
  for (const std::string& shard : split.shards) all += shard;
  return storage->WriteStringToFile(JoinPath(w, file), all);
}

}  // namespace shardpoint::internal_checkpoint
