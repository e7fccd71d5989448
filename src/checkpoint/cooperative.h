// Cooperative load (LoadOptions::cooperative): when several ranks need the
// same stored bytes (the same part of the same chunk, into the same dtype,
// e.g. data-parallel replicas of a TP shard), one of them reads them and the
// others receive them over the Comm.
//
// Collective; every rank computes the same assignment from the all-gathered
// piece identities: each shared piece goes to the holder that has read the
// fewest bytes so far (largest pieces first, lowest rank on ties). Reads
// finish and are agreed on before any bytes move; the bytes then move in
// rounds of AllToAll, each round bounded by `round_bytes` in total (plus one
// piece), so memory stays bounded whatever the checkpoint size.
#pragma once

#include <cstdint>

#include "shardpoint/comm.h"
#include "src/checkpoint/reader.h"

namespace shardpoint::internal {

struct CooperativeStats {
  uint64_t bytes_read = 0;      // from storage by this rank
  uint64_t bytes_received = 0;  // from other ranks
  uint64_t bytes_sent = 0;      // to other ranks
  uint64_t requests = 0;        // read requests to storage by this rank
  uint64_t bytes_needed = 0;    // bytes of the pieces this rank read
};

Status CooperativeLoad(const Manifest& m, const LoadPlan& plan, Comm& comm, DataFiles* files,
                       ThreadPool* pool, const ReadOptions& options, uint64_t round_bytes,
                       CooperativeStats* stats);

}  // namespace shardpoint::internal
