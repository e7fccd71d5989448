// Writing the manifest in either form: one v2 manifest, or (format v3,
// docs/format.md section 3.2) an index in `manifest` and its shards back to
// back in `data/manifest.shards` (src/source/manifest_shards.h reads them).
#pragma once

#include <cstdint>
#include <string>

#include "shardpoint/storage.h"
#include "src/format/manifest_index.h"

namespace shardpoint::internal_checkpoint {

// A save writes an index and shards (v4) when the v2 encoding would exceed
// `threshold` bytes, cut into shards of about `shard_bytes` (records larger
// than that into parts of about `part_bytes`); else one v2 manifest (one read).
struct ManifestSharding {
  uint64_t threshold = uint64_t{1} << 20;
  uint64_t shard_bytes = internal_format::kDefaultShardBytes;
  uint64_t part_bytes = internal_format::kDefaultPartBytes;
};
ManifestSharding GetManifestSharding();
// Process-wide (tests and the bench set it; saves read it at commit).
void SetManifestSharding(const ManifestSharding& s);

// Rank 0 at commit, before `w`/data is synced: writes `w`/data/manifest.shards
// (durable) when the manifest is sharded. Returns the bytes of `manifest`:
// the index, or the v2 manifest.
Result<std::string> WriteManifestShards(Storage* storage, const std::string& w,
                                        const internal_format::Manifest& m);

// Writes `split`'s shards (all in one file: SplitManifest's) back to back to
// their file under `w` and fsyncs it (the commit's SyncDir of `w`/data makes
// its name durable). Nothing when there is no shard.
Status WriteShardFile(Storage* storage, const std::string& w,
                      const internal_format::SplitResult& split);

}  // namespace shardpoint::internal_checkpoint
