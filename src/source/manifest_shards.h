// Reading format v3's manifest shards (docs/format.md section 3.2): the
// shards file `data/manifest.shards`, whose layout the index gives.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "shardpoint/storage.h"
#include "src/format/manifest_index.h"

namespace shardpoint::internal_source {

// Reads shards `which` (sorted) of `index` from `dir`: one open of the
// shards file and one read per run of adjacent shards.
Result<std::vector<std::pair<uint32_t, std::string>>> ReadShards(
    Storage* storage, const std::string& dir, const internal_format::ManifestIndex& index,
    const std::vector<uint32_t>& which);

// `top` is the content of `dir`/manifest. v1 and v2: returned as is. v3: the
// v2 encoding of the whole manifest (the index and every shard, verified).
Result<std::string> WholeManifestBytes(Storage* storage, const std::string& dir, std::string top);
// The same, decoded (version 3 for an index and its shards).
Result<internal_format::Manifest> WholeManifest(Storage* storage, const std::string& dir,
                                                const std::string& top);

}  // namespace shardpoint::internal_source
