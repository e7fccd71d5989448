#include "src/source/manifest_shards.h"

#include <memory>

#include "src/io/path.h"

using shardpoint::internal_format::DecodeIndex;
using shardpoint::internal_format::DecodeManifest;
using shardpoint::internal_format::EncodedVersion;
using shardpoint::internal_format::EncodeManifest;
using shardpoint::internal_format::IsIndexVersion;
using shardpoint::internal_format::kManifestName;
using shardpoint::internal_format::kShardsFile;
using shardpoint::internal_format::Manifest;
using shardpoint::internal_format::ManifestIndex;
using shardpoint::internal_format::MergeShards;
using shardpoint::internal_io::JoinPath;

namespace shardpoint::internal_source {

Result<std::vector<std::pair<uint32_t, std::string>>> ReadShards(
    Storage* storage, const std::string& dir, const ManifestIndex& index,
    const std::vector<uint32_t>& which) {
  std::vector<std::pair<uint32_t, std::string>> out;
  if (which.empty()) return out;
  SP_ASSIGN_OR_RETURN(std::unique_ptr<ReadableFile> f,
                      storage->NewReadableFile(JoinPath(dir, kShardsFile)));
  for (size_t i = 0; i < which.size();) {
    // A run of adjacent shards is one read.
    size_t j = i + 1;
    while (j < which.size() && which[j] == which[j - 1] + 1) ++j;
    for (size_t k = i; k < j; ++k) {
      if (which[k] >= index.shards.size()) {
        return InternalError("ReadShards: shard " + std::to_string(which[k]) + " of " +
                             std::to_string(index.shards.size()));
      }
    }
    const uint64_t begin = index.shards[which[i]].offset;
    const uint64_t end = index.shards[which[j - 1]].offset + index.shards[which[j - 1]].nbytes;
    std::string run(end - begin, '\0');
    SP_RETURN_IF_ERROR(f->ReadAt(begin, run.size(), run.data()));
    for (size_t k = i; k < j; ++k) {
      const auto& r = index.shards[which[k]];
      out.emplace_back(which[k], run.substr(r.offset - begin, r.nbytes));
    }
    i = j;
  }
  return out;
}

Result<Manifest> WholeManifest(Storage* storage, const std::string& dir, const std::string& top) {
  const std::string name = JoinPath(dir, kManifestName);
  if (!IsIndexVersion(EncodedVersion(top))) return DecodeManifest(top, name);
  SP_ASSIGN_OR_RETURN(ManifestIndex index, DecodeIndex(top, name));
  std::vector<uint32_t> all(index.shards.size());
  for (size_t s = 0; s < all.size(); ++s) all[s] = static_cast<uint32_t>(s);
  SP_ASSIGN_OR_RETURN(auto shards, ReadShards(storage, dir, index, all));
  return MergeShards(std::move(index), shards, dir);
}

Result<std::string> WholeManifestBytes(Storage* storage, const std::string& dir, std::string top) {
  if (!IsIndexVersion(EncodedVersion(top))) return top;
  SP_ASSIGN_OR_RETURN(Manifest m, WholeManifest(storage, dir, top));
  return EncodeManifest(m);
}

}  // namespace shardpoint::internal_source
