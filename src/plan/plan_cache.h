// The library side of SavePlanCache (include/shardpoint/plan_cache.h).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "shardpoint/plan_cache.h"
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

struct SavePlanCacheImpl {
  bool valid = false;
  PlanKey key;
  // Never changed once stored: each save fills the checksums, common blob and
  // metadata into its own copy of the manifest.
  std::shared_ptr<const SavePlan> plan;
  int64_t hits = 0, misses = 0;
};

// The cached plan if `key` matches (counts a hit), else nullptr (counts a miss).
std::shared_ptr<const SavePlan> LookupPlan(SavePlanCache& cache, const PlanKey& key);
void StorePlan(SavePlanCache& cache, const PlanKey& key, std::shared_ptr<const SavePlan> plan);

}  // namespace shardpoint::internal_plan
