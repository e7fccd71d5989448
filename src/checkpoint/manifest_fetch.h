// Fetching the part of a sharded (format v3 to v6) manifest that each rank needs,
// reading each shard from storage once for all ranks.
//
// Collective, after the index has been broadcast (rank 0 read it):
//   1. every rank decodes the index (checking every entry, building only
//      those of its State's keys, and keeping the names of the keys it owns
//      in the request check: IndexKeep; a cooperative load under the limit
//      below builds every entry) and finds the shards holding its keys, of a
//      key cut into parts (v4) those whose span meets the boxes of its
//      regions (ShardsForBoxes);
//   2. all-to-all: each rank asks shard s of its reader, rank s mod N;
//   3. each reader reads the shards someone asked for, each once (one open
//      of each shard file they are in, data/manifest.shards or in v6 e.g.
//      data/manifest.<rank>.shards, one read per run of shards adjacent in
//      a file), and
//      all-to-all sends each rank the shards it asked for (or the error);
//   4. each rank checks and decodes only its shards (MergeShards).
// So the storage sees 1 + (distinct shards the job needs) metadata reads,
// whatever the rank count, and a rank receives and decodes about its keys'
// records. A failure on a rank (a bad index, a shard that fails its checksum)
// is that rank's status; the load agrees on it in its first all-gather.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "shardpoint/comm.h"
#include "shardpoint/state.h"
#include "shardpoint/storage.h"
#include "src/source/source.h"

namespace shardpoint::internal_checkpoint {

struct FetchStats {
  uint64_t shards_received = 0;  // shards this rank decoded
  uint64_t bytes_received = 0;   // their bytes
  uint64_t chunks_received = 0;  // the chunk records in them
  uint64_t chunks_kept = 0;      // of which kept: those meeting its boxes (all, cooperative)
  uint64_t shards_read = 0;      // shards this rank read from storage for anyone
  uint64_t storage_reads = 0;    // read requests it made for them
};

// Whether broadcast source bytes ('S' + the manifest file) hold a v3 to v6 index.
bool IsShardedIndex(std::string_view source_bytes);

// A cooperative load checks and assigns every rank's pieces on every rank, so
// each rank must hold the records of every rank's keys: at scale, nearly the
// whole manifest (358 MB at 65,536 ranks of a 70B model). Where the index's
// shards total more than this, a load reads alone instead (the Source says
// so: Source::own_records_only). Process-wide; tests lower it.
inline constexpr uint64_t kCooperativeManifestBytes = uint64_t{64} << 20;
uint64_t CooperativeManifestBytes();
void SetCooperativeManifestBytes(uint64_t bytes);

// Collective (every rank, the same `source_bytes`). The Source of `dir` with
// the records of the keys `state` requests: only the chunks meeting its boxes
// and the objects it asks (other keys keep their skeleton); with
// `every_ranks_keys` (a cooperative load, which checks and assigns every
// rank's pieces on every rank), every chunk of the keys any rank requests,
// unless the shards exceed CooperativeManifestBytes().
// Returns a rank's own failure; a collective failure is the Comm's error.
Result<internal_source::Source> FetchShardedSource(std::string_view source_bytes,
                                                   const std::string& dir, const State& state,
                                                   bool every_ranks_keys, Comm& comm,
                                                   Storage* storage, FetchStats* stats,
                                                   Status* collective);

// The FetchStats of the last FetchShardedSource on this thread (a rank is a
// thread under a ThreadComm; tests and the bench read it).
FetchStats LastFetchStats();

}  // namespace shardpoint::internal_checkpoint
