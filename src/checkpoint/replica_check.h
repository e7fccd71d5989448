// SaveOptions::verify_replicas: every rank that holds a replica it does not
// write checksums its copy; the key's owner compares it with the writer's
// checksum (replica_owners.h).
// Catches data-parallel desync and ranks that wrongly claim the same box of
// a key (e.g. two TP ranks declaring different data as one replicated box).
#pragma once

#include <cstdint>
#include <vector>

#include "shardpoint/state.h"
#include "src/io/thread_pool.h"
#include "src/plan/save_plan.h"

namespace shardpoint::internal_checkpoint {

// XXH3-64 of the elements of `v` in row-major order (equal to Checksum64 of
// the same bytes laid out contiguously).
uint64_t ChecksumView(const internal_geometry::View& v);

// The checksums of rf.replicas, in order, computed on `pool`.
std::vector<uint64_t> ReplicaChecksums(const internal_plan::RankFile& rf,
                                       const std::vector<internal_plan::Region>& regions,
                                       const State& state, ThreadPool* pool);

}  // namespace shardpoint::internal_checkpoint
