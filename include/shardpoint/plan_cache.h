// SavePlanCache: reuse the global save plan while the state's structure holds.
//
// Planning a save exchanges each rank's regions with the keys' owners and
// has each owner check its keys (docs/architecture.md, "How planning
// scales"). Between two saves of a training job the structure (keys, dtypes,
// shapes, boxes, object sizes) rarely changes, only the bytes do. Pass the
// same cache to every Save of a rank (SaveOptions::plan_cache): each rank
// hashes its own encoded contribution (128 bits, with its rank and the rank
// count) and the ranks agree (one byte to rank 0 and back) whether every
// rank's cache holds its part of the plan for that hash (rank 0: and the
// manifest it assembled); if so the exchanges are skipped and rank 0 reuses
// its plan, so all ranks hit or miss together. A miss replans everywhere and
// replaces the entry (one entry is kept).
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
