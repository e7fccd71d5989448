// Reading the manifest shards of formats v3 to v6 (docs/format.md section
// 3.2): in `data/manifest.shards` or, in v6, the shard files the index names
// (e.g. one per owner rank), at the offsets the index gives.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "shardpoint/storage.h"
#include "src/format/manifest_index.h"

namespace shardpoint::internal_source {

// Reads shards `which` (sorted) of `index` from `dir`, in that order: one
// open of each shard file they are in and one read per run of adjacent
// shards (in one file, each starting where the one before ends). `reads`
// (optional) receives the number of reads.
Result<std::vector<std::pair<uint32_t, std::string>>> ReadShards(
    Storage* storage, const std::string& dir, const internal_format::ManifestIndex& index,
    const std::vector<uint32_t>& which, uint64_t* reads = nullptr);

// `top` is the content of `dir`/manifest. v1 and v2: returned as is. v3 to
// v6: the v2 encoding of the whole manifest (the index and every shard, verified).
Result<std::string> WholeManifestBytes(Storage* storage, const std::string& dir, std::string top);
// The same, decoded (the index's version for an index and its shards).
Result<internal_format::Manifest> WholeManifest(Storage* storage, const std::string& dir,
                                                const std::string& top);

}  // namespace shardpoint::internal_source
