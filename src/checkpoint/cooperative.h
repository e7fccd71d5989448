// Cooperative load (LoadOptions::cooperative): each verified block that
// several ranks need is read and verified by exactly one of them, which sends
// every other rank the bytes it needs from it over the Comm; so the ranks
// together read each needed stored block once, and each reads about 1/N.
//
// Collective; every rank computes the same assignment (AssignSpans,
// src/plan/span_assignment.h) from the all-gathered plans
// (src/checkpoint/piece_message.h), walking the blocks (the
// verification block; 1 MiB units when nothing is verified) in file order:
// a block one rank needs is its read; a block several need goes to one of its
// preferred readers (the ranks needing at least half as much of it as the one
// needing most): the reader of the previous block while it stays within a
// slack (1/16 of an even share, at least a block, at most cooperative_round_bytes / 4) of
// the least loaded preferred reader, else the least loaded one; so reads stay
// contiguous (few large requests) and each rank reads about 1/N. Bytes move
// in rounds: each rank reads its spans of a round (verifying every block
// as it places its bytes), keeps its own bytes and packs the other ranks'
// (their pieces' elements inside the span, in flat order); one AllToAll
// moves them, with the sender's status in the first byte of each payload,
// while the next round's reads run on another thread. A round's
// sends stay within `cooperative_round_bytes` (and 1/8 of all sends, at least 8 MiB;
// plus one span of at most cooperative_round_bytes / 4), two rounds at most are held:
// memory stays bounded whatever the checkpoint size. A failure on one
// rank (a checksum mismatch in a block it read for others included) is every
// rank's error: it travels in the status byte of the next exchange (one
// collective per round, src/comm/agreed.h AllToAllAgreed), else in one
// agreement at the end; the failed rank reads no more meanwhile. Tensor groups
// (LoadOptions::tensor_groups) are announced after the round that places
// their last bytes, in the order they complete: a caller copying groups to a
// device overlaps the copies with the later rounds' reads.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "shardpoint/comm.h"
#include "src/checkpoint/reader.h"

namespace shardpoint::internal_checkpoint {

struct CooperativeStats {
  uint64_t bytes_read = 0;      // from storage by this rank
  uint64_t bytes_received = 0;  // from other ranks
  uint64_t bytes_sent = 0;      // to other ranks
  uint64_t requests = 0;        // read requests to storage by this rank
  uint64_t bytes_needed = 0;    // needed bytes (by any rank) in the blocks this rank read
};

// This rank's tensor groups: the group of each of its plan's pieces, and the
// number of groups; `announce(g)` is called once for each g in [0, count),
// once every piece of group g is placed (groups of no piece first), in the
// order they complete. No groups: `count` 0.
struct LoadGroups {
  std::vector<int> of_piece;
  int count = 0;
  std::function<void(int)> announce;  // must not throw
};

Status CooperativeLoad(const internal_format::Manifest& m, const internal_plan::LoadPlan& plan,
                       Comm& comm, DataFiles* files, ThreadPool* pool, const ReadOptions& options,
                       uint64_t cooperative_round_bytes, const LoadGroups& groups,
                       CooperativeStats* stats);

}  // namespace shardpoint::internal_checkpoint
