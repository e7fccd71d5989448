// Whether a cooperative load over a Comm whose transport is not shardpoint's
// own (torch.distributed, mpi4py: src/comm/transport.h) exchanges blocks at
// all. There every round costs collectives of the Comm (gloo over TCP: each
// one a round trip through the Python adapter), and ranks reading the same
// blocks alone share them through the page cache. So the exchange runs only
// where reading alone would put more than 1.05 bytes through read() per
// needed byte (a verified block read whole for a strip of it: a load cut
// along another dim); otherwise (the saved layout, replicas of whole blocks)
// every rank reads alone.
#pragma once

#include "shardpoint/comm.h"
#include "src/format/manifest.h"
#include "src/plan/load_plan.h"

namespace shardpoint::internal_checkpoint {

// The bytes this rank would read alone for `plan`: for each piece, the
// verification blocks its elements span in its chunk (`verify`), else its
// own bytes.
uint64_t BytesReadAlone(const internal_format::Manifest& m, const internal_plan::LoadPlan& plan,
                        bool verify);

// Collective (one all-gather): every rank's BytesReadAlone against the bytes
// all ranks need; true where the former exceed 1.05 times the latter.
Result<bool> ExchangeSavesReads(Comm& comm, const internal_format::Manifest& m,
                                const internal_plan::LoadPlan& plan, bool verify);

}  // namespace shardpoint::internal_checkpoint
