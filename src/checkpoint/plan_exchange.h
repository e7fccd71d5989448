// The collectives of distributed save planning (src/plan/dist_plan.h), and
// the plan cache's agreement:
//   0. cache check: each rank compares a hash of its own contribution with
//      its cache; a gather to rank 0 and a broadcast tell every rank whether
//      all hit (one byte each way);
//   1. shares to the keys' owners (all-to-all);
//   2. the owners' replies, or their plan errors to every rank (all-to-all);
//      on the error path only, where an error names a key no share named
//      (dist_plan.h), an all-gather of its holders' names renames it.
// A rank whose step fails sends its error to every rank instead of its
// payloads, and every rank returns the lowest failing rank's error prefixed
// "rank R: " (AllGatherAgreed's rule), so no rank hangs.
#pragma once

#include <memory>
#include <string>

#include "shardpoint/comm.h"
#include "shardpoint/plan_cache.h"
#include "src/plan/dist_plan.h"

namespace shardpoint::internal_checkpoint {

// What planning sent and received, in bytes (payloads), for SaveStats and
// the bench.
struct PlanTraffic {
  uint64_t sent = 0, received = 0;
};

struct PlannedSave {
  // Agreed: every rank's plan came from its cache (then so do the records
  // each rank assembles at the commit, and the structures are not sent again).
  bool cached = false;
  std::shared_ptr<const internal_plan::LocalPlan> local;
};

// Collective. `mine` is this rank's contribution or the error describing its
// state. Returns the agreed failure of a step, or OK with this rank's plan
// or the plan error every rank shares (in *plan_status, which then goes into
// the gather of step 4 as today's plan errors do).
Status PlanSaveCollective(Comm& comm, const Result<internal_plan::Contribution>& mine,
                          SavePlanCache* cache, bool list_replicas, PlannedSave* out,
                          Status* plan_status, PlanTraffic* traffic);

}  // namespace shardpoint::internal_checkpoint
