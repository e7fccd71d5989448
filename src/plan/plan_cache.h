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
  // The records this rank assembled at the commit with it (its keys as their
  // owner; on rank 0 also every object). Never changed once stored: each save
  // fills the checksums into its own copy.
  std::shared_ptr<const OwnedPlan> owned;
  std::shared_ptr<const OwnedPlan> objects;  // rank 0
  int64_t hits = 0, misses = 0;
};

// Whether the cache holds this rank's part for `key` and its owned records
// (and, on rank 0, the objects'). Counts nothing: the ranks agree first.
bool CacheMatches(SavePlanCache& cache, const PlanKey& key, bool rank0);
void CountLookup(SavePlanCache& cache, bool hit);
// Replanning: forget the entry (so that a plan that fails leaves none).
void InvalidatePlan(SavePlanCache& cache);
void StoreLocalPlan(SavePlanCache& cache, const PlanKey& key, std::shared_ptr<const LocalPlan> lp);
// The records assembled at the commit of the stored local plan: this rank's
// keys', and on rank 0 the objects'.
void StoreOwnedPlan(SavePlanCache& cache, std::shared_ptr<const OwnedPlan> owned);
void StoreObjectPlan(SavePlanCache& cache, std::shared_ptr<const OwnedPlan> objects);

}  // namespace shardpoint::internal_plan
