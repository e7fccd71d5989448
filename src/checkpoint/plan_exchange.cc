#include "src/checkpoint/plan_exchange.h"

#include <utility>

#include "src/base/guard.h"
#include "src/plan/plan_cache.h"

using shardpoint::internal_base::Guarded;
using shardpoint::internal_plan::CacheMatches;
using shardpoint::internal_plan::Contribution;
using shardpoint::internal_plan::CountLookup;
using shardpoint::internal_plan::EncodeContribution;
using shardpoint::internal_plan::EncodeShares;
using shardpoint::internal_plan::InvalidatePlan;
using shardpoint::internal_plan::LocalPlan;
using shardpoint::internal_plan::LocalPlanKey;
using shardpoint::internal_plan::NameErrorReplies;
using shardpoint::internal_plan::NamesHeld;
using shardpoint::internal_plan::OwnerOutcome;
using shardpoint::internal_plan::PlanKey;
using shardpoint::internal_plan::PlanLocal;
using shardpoint::internal_plan::PlanOwnedKeys;
using shardpoint::internal_plan::Replies;
using shardpoint::internal_plan::StoreLocalPlan;
using shardpoint::internal_plan::UnnamedInReplies;

namespace shardpoint::internal_checkpoint {
namespace {

// Every rank's message to every other: empty (nothing), '\0' + payload, or,
// from a rank that failed, its status code and message (to every rank).
Status AllToAllAgreed(Comm& comm, const Status& local, std::vector<std::string> send,
                      std::vector<std::string>* recv, PlanTraffic* traffic) {
  const int n = comm.size();
  if (!local.ok()) {
    std::string err(1, static_cast<char>(local.code()));
    err += local.message();
    send.assign(n, err);
  } else {
    for (std::string& s : send) {
      if (!s.empty()) s.insert(s.begin(), '\0');
    }
  }
  for (const std::string& s : send) traffic->sent += s.size();
  SP_RETURN_IF_ERROR(comm.AllToAll(send, recv));
  for (int r = 0; r < n; ++r) {
    std::string& m = (*recv)[r];
    traffic->received += m.size();
    if (m.empty()) continue;
    if (m[0] != '\0') {
      const auto c = static_cast<unsigned char>(m[0]);
      std::string text = "rank " + std::to_string(r) + ": " + m.substr(1);
      if (c > static_cast<unsigned char>(StatusCode::kDeadlineExceeded)) {
        return InternalError(text + " (unknown status code " + std::to_string(c) + ")");
      }
      return Status(static_cast<StatusCode>(c), std::move(text));
    }
    m.erase(0, 1);
  }
  return OkStatus();
}

Replies Nonempty(const std::vector<std::string>& recv) {
  Replies out;
  for (size_t r = 0; r < recv.size(); ++r) {
    if (!recv[r].empty()) out.emplace_back(static_cast<int>(r), recv[r]);
  }
  return out;
}

// Step 0: whether every rank's cache holds its part (rank 0: and the global
// plan). Counts the hit or miss once the ranks agree.
Status AgreeOnCache(Comm& comm, bool local_hit, SavePlanCache* cache, bool* all_hit) {
  std::vector<std::string> flags;
  SP_RETURN_IF_ERROR(comm.Gather(std::string(1, local_hit ? '1' : '0'), 0, &flags));
  std::string all(1, '1');
  if (comm.rank() == 0) {
    for (const std::string& f : flags) {
      if (f != "1") all = "0";
    }
  }
  SP_RETURN_IF_ERROR(comm.Broadcast(&all, 0));
  *all_hit = all == "1";
  if (cache) CountLookup(*cache, *all_hit);
  return OkStatus();
}

}  // namespace

Status PlanSaveCollective(Comm& comm, const Result<Contribution>& mine, SavePlanCache* cache,
                          bool list_replicas, PlannedSave* out, Status* plan_status,
                          PlanTraffic* traffic) {
  const int n = comm.size(), rank = comm.rank();
  PlanKey key;
  bool local_hit = false;
  if (mine.ok() && cache) {
    key = LocalPlanKey(EncodeContribution(*mine), rank, n, list_replicas);
    local_hit = CacheMatches(*cache, key, rank == 0);
  }
  SP_RETURN_IF_ERROR(AgreeOnCache(comm, local_hit, cache, &out->cached));
  if (out->cached) {
    out->local = cache->impl().local;
    return OkStatus();
  }
  if (cache) InvalidatePlan(*cache);

  // 1. Shares to the owners.
  Result<std::vector<std::string>> shares = Guarded("save: planning", [&]() {
    return mine.ok() ? Result<std::vector<std::string>>(EncodeShares(*mine, n))
                     : Result<std::vector<std::string>>(mine.status());
  });
  std::vector<std::string> received;
  SP_RETURN_IF_ERROR(AllToAllAgreed(comm, shares.status(),
                                    shares.ok() ? std::move(*shares) : std::vector<std::string>(n),
                                    &received, traffic));

  // 2. The owners' checks and replies.
  std::string skeleton;
  Result<std::vector<std::string>> replies =
      Guarded("save: planning", [&]() -> Result<std::vector<std::string>> {
        SP_ASSIGN_OR_RETURN(OwnerOutcome owned, PlanOwnedKeys(Nonempty(received)));
        std::vector<std::string> to(n);
        if (!owned.error_reply.empty()) {
          to.assign(n, owned.error_reply);
        } else {
          for (auto& [s, bytes] : owned.replies) to[s] = std::move(bytes);
        }
        skeleton = std::move(owned.skeleton);
        return to;
      });
  received.clear();
  SP_RETURN_IF_ERROR(AllToAllAgreed(
      comm, replies.status(), replies.ok() ? std::move(*replies) : std::vector<std::string>(n),
      &received, traffic));

  // 2b. On the error path only, where an owner's error names a key by a
  // placeholder (no share named it): its holders tell every rank the name.
  if (std::vector<uint64_t> unnamed = UnnamedInReplies(received); !unnamed.empty()) {
    std::vector<std::string> held;
    const std::string names = NamesHeld(*mine, unnamed);
    traffic->sent += names.size();
    SP_RETURN_IF_ERROR(comm.AllGather(names, &held));
    for (const std::string& h : held) traffic->received += h.size();
    SP_RETURN_IF_ERROR(NameErrorReplies(held, &received));
  }

  // 3. This rank's plan, or the plan error every rank shares.
  Result<LocalPlan> lp = Guarded("save: planning", [&]() {
    return PlanLocal(*mine, Nonempty(received), n, skeleton, rank, list_replicas);
  });
  *plan_status = lp.status();
  if (!lp.ok()) return OkStatus();
  out->local = std::make_shared<const LocalPlan>(std::move(*lp));
  if (cache) StoreLocalPlan(*cache, key, out->local);
  return OkStatus();
}

}  // namespace shardpoint::internal_checkpoint
