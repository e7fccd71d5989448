// ParallelFor over the public ThreadPool (shardpoint/thread_pool.h), which
// calls get through Resources (src/io/resources.h resolves the defaults).
#pragma once

#include <cstdint>
#include <functional>

#include "shardpoint/status.h"
#include "shardpoint/thread_pool.h"

namespace shardpoint::internal_io {

// Runs fn(i) for i in [0, n) on the pool (the caller's thread helps) and
// returns the first error by index, after all tasks have finished. An
// exception thrown by fn(i) is that index's error (StatusFromCurrentException).
Status ParallelFor(ThreadPool* pool, int64_t n, const std::function<Status(int64_t)>& fn);

}  // namespace shardpoint::internal_io
