// Save's commit (step 4): the keys' owners assemble and write their own
// records, so that rank 0 receives the objects and the index, not every
// chunk record of the manifest (544 MB at 65,536 ranks before).
//
// 4a. After the writes, one all-to-all: each rank sends the owner of each
//     key it wrote chunks of (KeyOwner) the chunks' places (its structure
//     for that owner, LocalPlan::owner_structures; not when the plan was
//     cached), their checksums and block checksums, and, with
//     verify_replicas, its replica checksums for that owner
//     (replica_owners.h). A rank that failed sends every rank one byte
//     instead, and owners that receive it assemble nothing: its own error
//     reaches rank 0 in the gather, as any rank's does.
// 4b. Each owner assembles its keys' records (AssembleOwned, or its cached
//     copy), fills in the checksums and compares the replicas. Records whose
//     size times the rank count is within the sharding threshold go to rank
//     0 as they are (so rank 0 receives at most the threshold in records);
//     larger ones are cut into shards written to data/manifest.<rank>.shards
//     (durable before the gather; on an object store held like the data
//     files) and rank 0 receives their index (format v6).
// 4c. Gather to rank 0 (with each rank's status): the objects the rank owns
//     and writes, their checksums, its replica finding and its part from 4b.
//     Rank 0 assembles the objects and either writes one manifest (nothing
//     sharded and small: format v2, as before) or writes the records it
//     received and the objects as its own shards (data/manifest.shards) and
//     the index of all shards as the manifest, the commit point, last.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "shardpoint/checkpoint.h"
#include "shardpoint/comm.h"
#include "shardpoint/plan_cache.h"
#include "shardpoint/storage.h"
#include "src/plan/dist_plan.h"

namespace shardpoint::internal_checkpoint {

// What a rank wrote (Save step 3): per item of its plan the checksum and the
// block checksums, and the replica checksums for each owner (EncodeReplicaSums;
// empty without verify_replicas).
struct Written {
  std::vector<uint64_t> sums;
  std::vector<std::vector<uint64_t>> blocks;
  std::vector<std::string> replica_sums;
};

// What an owner received in 4a: (sender, payload) by sender, and whether a
// sender failed.
struct OwnerInbox {
  bool sender_failed = false;
  std::vector<std::pair<int, std::string>> from;
};

// 4b's rule: whether an owner sends its records (`v2_bytes` encoded) to rank
// 0 as they are rather than writing its shards: rank 0 itself (they cross no
// link), or records within threshold / n, so that rank 0 receives at most the
// sharding threshold in records.
bool SendsRecords(int rank, int n, uint64_t v2_bytes, uint64_t threshold);

// 4a, collective. `lp`: this rank's plan, or null where it failed to plan or
// write (it sends the one byte). Moves the block checksums out of `written`.
// Fails only if the exchange does. *sent, *received: its bytes.
Status SendToOwners(Comm& comm, const internal_plan::LocalPlan* lp, bool cached, Written& written,
                    OwnerInbox* inbox, uint64_t* sent, uint64_t* received);

// 4b and this rank's 4c message. `cache` (may be null) holds the assembled
// records when the plan was cached, and receives them when not.
Result<std::string> CommitMessageOf(const OwnerInbox& inbox, const internal_plan::LocalPlan& lp,
                                    bool cached, SavePlanCache* cache, const Written& written,
                                    Comm& comm, Storage* storage, const std::string& write_dir);

// What rank 0 tells every rank with the outcome.
struct CommitTotals {
  uint64_t bytes = 0, files = 0, chunks = 0;
};

// 4c on rank 0, after every rank's message arrived OK: the objects, the
// first replica mismatch any owner found (which fails the save), then the
// manifest bytes, its shards written; `state` gives the common blob and
// metadata.
Result<std::string> AssembleManifest(const std::vector<std::string>& gathered, bool cached,
                                     SavePlanCache* cache, const State& state, Storage* storage,
                                     const std::string& write_dir, CommitTotals* totals);

}  // namespace shardpoint::internal_checkpoint
