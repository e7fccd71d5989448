#include "src/plan/plan_cache.h"

#include <xxhash.h>

namespace shardpoint {

SavePlanCache::SavePlanCache() : impl_(std::make_unique<internal_plan::SavePlanCacheImpl>()) {}
SavePlanCache::~SavePlanCache() = default;
int64_t SavePlanCache::hits() const { return impl_->hits; }
int64_t SavePlanCache::misses() const { return impl_->misses; }
void SavePlanCache::Clear() {
  impl_->valid = false;
  impl_->plan.reset();
}

namespace internal_plan {

PlanKey HashContributions(const std::vector<std::string>& encoded) {
  XXH3_state_t* state = XXH3_createState();
  XXH3_128bits_reset(state);
  const uint64_t n = encoded.size();
  XXH3_128bits_update(state, &n, sizeof n);
  for (const std::string& e : encoded) {
    const uint64_t len = e.size();
    XXH3_128bits_update(state, &len, sizeof len);
    XXH3_128bits_update(state, e.data(), e.size());
  }
  XXH128_hash_t h = XXH3_128bits_digest(state);
  XXH3_freeState(state);
  return PlanKey{h.low64, h.high64};
}

std::shared_ptr<const SavePlan> LookupPlan(SavePlanCache& cache, const PlanKey& key) {
  SavePlanCacheImpl& c = cache.impl();
  if (c.valid && c.key == key) {
    ++c.hits;
    return c.plan;
  }
  ++c.misses;
  return nullptr;
}

void StorePlan(SavePlanCache& cache, const PlanKey& key, std::shared_ptr<const SavePlan> plan) {
  SavePlanCacheImpl& c = cache.impl();
  c.valid = plan != nullptr;
  c.key = key;
  c.plan = std::move(plan);
}

}  // namespace internal_plan
}  // namespace shardpoint
