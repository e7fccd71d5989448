// UseDirectReads: whether a load opens its data files with O_DIRECT.
#pragma once

#include "src/format/manifest.h"
#include "src/plan/load_plan.h"

namespace shardpoint::internal_checkpoint {

// LoadOptions::direct_io where it pays. Off where several ranks read alone
// (`ranks_read_alone`: more than one rank, no block exchange) and this
// rank's plan reads strips of chunks (a piece in several runs of its chunk):
// it reads the whole blocks around its strips, which the other ranks read as
// well; buffered, the page cache fetches each block from the device once,
// direct, every rank would (an other-dim load over 4 gloo ranks: 1.7x the CPU
// and half the speed, docs/performance.md (h)). Else `direct_io` as given.
bool UseDirectReads(bool direct_io, bool ranks_read_alone, const internal_format::Manifest& m,
                    const internal_plan::LoadPlan& plan);

}  // namespace shardpoint::internal_checkpoint
