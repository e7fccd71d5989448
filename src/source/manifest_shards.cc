#include "src/source/manifest_shards.h"

#include <algorithm>
#include <memory>
#include <tuple>

#include "src/io/path.h"

using shardpoint::internal_format::DecodeIndex;
using shardpoint::internal_format::DecodeManifest;
using shardpoint::internal_format::EncodedVersion;
using shardpoint::internal_format::EncodeManifest;
using shardpoint::internal_format::IsIndexVersion;
using shardpoint::internal_format::kManifestName;
using shardpoint::internal_format::Manifest;
using shardpoint::internal_format::ManifestIndex;
using shardpoint::internal_format::MergeShards;
using shardpoint::internal_format::ShardFileName;
using shardpoint::internal_format::ShardRef;
using shardpoint::internal_io::JoinPath;

namespace shardpoint::internal_source {

Result<std::vector<std::pair<uint32_t, std::string>>> ReadShards(Storage* storage,
                                                                 const std::string& dir,
                                                                 const ManifestIndex& index,
                                                                 const std::vector<uint32_t>& which,
                                                                 uint64_t* reads) {
  std::vector<std::pair<uint32_t, std::string>> out;
  if (reads != nullptr) *reads = 0;
  for (uint32_t s : which) {
    if (s >= index.shards.size() || index.shards[s].file >= index.shard_files.size()) {
      return InternalError("ReadShards: shard " + std::to_string(s) + " of " +
                           std::to_string(index.shards.size()) + " (in " +
                           std::to_string(index.shard_files.size()) + " shard files)");
    }
  }
  // By file, then offset: each file opened once, and only one at a time
  // (a whole-manifest read may span one file per owner rank).
  std::vector<size_t> order(which.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  auto at = [&](size_t i) -> const ShardRef& { return index.shards[which[i]]; };
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return std::tie(at(a).file, at(a).offset) < std::tie(at(b).file, at(b).offset);
  });
  out.resize(which.size());
  std::unique_ptr<ReadableFile> f;
  for (size_t i = 0; i < order.size();) {
    // A run of shards adjacent in one file is one read.
    const ShardRef& first = at(order[i]);
    if (i == 0 || at(order[i - 1]).file != first.file) {
      f.reset();
      SP_ASSIGN_OR_RETURN(
          f, storage->NewReadableFile(JoinPath(dir, ShardFileName(index.shard_files[first.file]))));
    }
    size_t j = i + 1;
    uint64_t end = first.offset + first.nbytes;
    // Shards of a file lie back to back: one starting at or before `end`
    // follows on (or is one asked twice).
    for (; j < order.size() && at(order[j]).file == first.file && at(order[j]).offset <= end; ++j) {
      end = std::max(end, at(order[j]).offset + at(order[j]).nbytes);
    }
    std::string run(end - first.offset, '\0');
    SP_RETURN_IF_ERROR(f->ReadAt(first.offset, run.size(), run.data()));
    if (reads != nullptr) ++*reads;
    for (size_t k = i; k < j; ++k) {
      const ShardRef& r = at(order[k]);
      out[order[k]] = {which[order[k]], run.substr(r.offset - first.offset, r.nbytes)};
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
