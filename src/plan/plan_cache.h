// The library side of SavePlanCache (include/shardpoint/plan_cache.h).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "shardpoint/plan_cache.h"
#include "src/plan/dist_plan.h"
#include "src/plan/save_plan.h"

namespace shardpoint::internal_plan {

// 128-bit hash of every rank's encoded contribution, with the rank count and
// each length mixed in (so contributions cannot shift between ranks).
struct PlanKey {
  uint64_t lo = 0, hi = 0;
  friend bool operator==(const PlanKey& a, const PlanKey& b) {
    return a.lo == b.lo && a.hi == b.hi;
  }
};
PlanKey HashContributions(const std::vector<std::string>& encoded);

// The key of one rank's part: its encoded contribution, its rank, the rank
// count and whether replicas are listed.
PlanKey LocalPlanKey(const std::string& encoded, int rank, int n, bool list_replicas);

struct SavePlanCacheImpl {
  bool valid = false;
  PlanKey key;
  // This rank's part of the plan.
  std::shared_ptr<const LocalPlan> local;
  // Rank 0: the global plan assembled with it. Never changed once stored:
  // each save fills the checksums, common blob and metadata into its own
  // copy of the manifest.
  std::shared_ptr<const SavePlan> plan;
  int64_t hits = 0, misses = 0;
};

// Whether the cache holds this rank's part for `key` (and, on rank 0, the
// global plan). Counts nothing: the ranks agree first.
bool CacheMatches(SavePlanCache& cache, const PlanKey& key, bool need_global);
void CountLookup(SavePlanCache& cache, bool hit);
// Replanning: forget the entry (so that a plan that fails leaves none).
void InvalidatePlan(SavePlanCache& cache);
void StoreLocalPlan(SavePlanCache& cache, const PlanKey& key, std::shared_ptr<const LocalPlan> lp);
// Rank 0: the global plan of the stored local plan.
void StoreGlobalPlan(SavePlanCache& cache, std::shared_ptr<const SavePlan> plan);

}  // namespace shardpoint::internal_plan
