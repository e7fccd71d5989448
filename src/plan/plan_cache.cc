#include "src/plan/plan_cache.h"

#include <xxhash.h>

namespace shardpoint {

SavePlanCache::SavePlanCache() : impl_(std::make_unique<internal_plan::SavePlanCacheImpl>()) {}
SavePlanCache::~SavePlanCache() = default;
int64_t SavePlanCache::hits() const { return impl_->hits; }
int64_t SavePlanCache::misses() const { return impl_->misses; }
void SavePlanCache::Clear() { internal_plan::InvalidatePlan(*this); }

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

PlanKey LocalPlanKey(const std::string& encoded, int rank, int n, bool list_replicas) {
  const uint64_t head[3] = {static_cast<uint64_t>(rank), static_cast<uint64_t>(n),
                            list_replicas ? 1u : 0u};
  std::string bytes(reinterpret_cast<const char*>(head), sizeof head);
  PlanKey k = HashContributions({bytes, encoded});
  return k;
}

bool CacheMatches(SavePlanCache& cache, const PlanKey& key, bool rank0) {
  const SavePlanCacheImpl& c = cache.impl();
  return c.valid && c.key == key && c.local && c.owned && (!rank0 || c.objects);
}

void CountLookup(SavePlanCache& cache, bool hit) {
  ++(hit ? cache.impl().hits : cache.impl().misses);
}

void InvalidatePlan(SavePlanCache& cache) {
  SavePlanCacheImpl& c = cache.impl();
  c.valid = false;
  c.local.reset();
  c.owned.reset();
  c.objects.reset();
}

void StoreLocalPlan(SavePlanCache& cache, const PlanKey& key, std::shared_ptr<const LocalPlan> lp) {
  SavePlanCacheImpl& c = cache.impl();
  c.valid = lp != nullptr;
  c.key = key;
  c.local = std::move(lp);
  c.owned.reset();
  c.objects.reset();
}

void StoreOwnedPlan(SavePlanCache& cache, std::shared_ptr<const OwnedPlan> owned) {
  if (cache.impl().valid) cache.impl().owned = std::move(owned);
}

void StoreObjectPlan(SavePlanCache& cache, std::shared_ptr<const OwnedPlan> objects) {
  if (cache.impl().valid) cache.impl().objects = std::move(objects);
}

}  // namespace internal_plan
}  // namespace shardpoint
