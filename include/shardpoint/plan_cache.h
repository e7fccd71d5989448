// SavePlanCache: reuse the global save plan while the state's structure holds.
//
// Planning a save costs time proportional to the number of regions of all
// ranks (seconds at thousands of ranks). Between two saves of a training job
// the structure (keys, dtypes, shapes, boxes, object sizes) rarely changes,
// only the bytes do. Pass the same cache to every Save of a rank
// (SaveOptions::plan_cache): the contributions are still all-gathered, but
// when every rank's encoded contribution is identical to the last save's
// (compared by a 128-bit hash of all of them), the previous plan is reused.
// Every rank sees the same gathered bytes, so all ranks hit or miss together;
// a miss replans and replaces the entry (one entry is kept).
//
// One cache per rank; not thread-safe (one save at a time uses it). It owns
// the cached plan (memory about that of the manifest).
#pragma once

#include <cstdint>
#include <memory>

namespace shardpoint {
namespace internal_plan {
struct SavePlanCacheImpl;
}

class SavePlanCache {
 public:
  SavePlanCache();
  ~SavePlanCache();
  SavePlanCache(const SavePlanCache&) = delete;
  SavePlanCache& operator=(const SavePlanCache&) = delete;

  int64_t hits() const;
  int64_t misses() const;
  // Drops the cached plan (the next save replans).
  void Clear();

  // For the library (src/plan/plan_cache.h).
  internal_plan::SavePlanCacheImpl& impl() { return *impl_; }

 private:
  std::unique_ptr<internal_plan::SavePlanCacheImpl> impl_;
};

}  // namespace shardpoint
