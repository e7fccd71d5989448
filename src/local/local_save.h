// LocalSave and LocalSaveAsync (local_tier.h) with a retention policy: the
// TieredManager's, whose local saves write into the pages of the checkpoint
// its retention removes next (recycle.h). A null policy: the public calls.
#pragma once

#include <cstdint>

#include "shardpoint/local_tier.h"
#include "src/local/recycle.h"

namespace shardpoint::internal_local {

Result<LocalSaveStats> LocalSaveWith(const State& state, int64_t iteration, Comm& comm,
                                     const LocalTierOptions& options, const RecyclePolicy* recycle);

Result<SaveHandle> LocalSaveAsyncWith(AsyncSaver& saver, const State& state, int64_t iteration,
                                      Comm& comm, const LocalTierOptions& options,
                                      const RecyclePolicy* recycle);

}  // namespace shardpoint::internal_local
