// Cooperative load (LoadOptions::cooperative): each verified block that
// several ranks need is read and verified by exactly one of them, which sends
// every other rank the bytes it needs from it over the Comm; so the ranks
// together read each needed stored block once, and each reads about 1/N.
//
// Collective; every rank computes the same assignment from the all-gathered
// plans (src/checkpoint/piece_message.h): each chunk's blocks (the
// verification block; 1 MiB units when nothing is verified) are grouped into
// runs of consecutive blocks with the same ranks needing them; a block one
// rank needs is its read; a shared run goes to its preferred readers (the
// ranks needing at least half as much of it as the one needing most), cut
// into contiguous spans that bring the least loaded of them level. Spans move
// in rounds: each rank reads its spans of a round (verifying every block
// before placing bytes), keeps its own bytes and packs the other ranks'
// (their pieces' elements inside the span, in flat order), then one AllToAll;
// a round's sends stay within `round_bytes` (plus one span of at most
// round_bytes / 4), so memory stays bounded whatever the checkpoint size.
// Every step is agreed on: a failure on one rank (a checksum mismatch in a
// block it read for others included) is every rank's error.
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
  uint64_t bytes_needed = 0;    // needed bytes (by any rank) in the blocks this rank read
};

Status CooperativeLoad(const Manifest& m, const LoadPlan& plan, Comm& comm, DataFiles* files,
                       ThreadPool* pool, const ReadOptions& options, uint64_t round_bytes,
                       CooperativeStats* stats);

}  // namespace shardpoint::internal
