// Distributed save planning: no rank sees every rank's layout.
//
// 1. Shares (all-to-all): each rank sends the regions of each of its keys to
//    the key's owner, KeyOwner(key) = XXH3-64(key) mod N, and each object to
//    the owner of its (key, index), ObjectOwner (the global planner checks
//    objects per (key, index) only): an object every rank holds a piece of,
//    such as each rank's RNG state, is spread over the ranks, not sent whole
//    to one owner (at 65,536 ranks that owner received 7.3 MB).
// 2. Owner check (all-to-all back): an owner groups what it received per
//    key and runs the global planner's per-key steps (key_group.h: dtype and
//    shape agree, replicas grouped, boxes tile the tensor, objects agree),
//    numbers the chunks (sorted by box, as PlanSave does) and chooses one
//    writer per chunk among its holders. It replies to each sender, per
//    region and object sent, the chunk number and whether the sender writes
//    it, holds a replica another rank writes, or neither (a declaration, a
//    duplicate). An owner that finds an error sends it, with its position in
//    the global planner's order (PlanError), to every rank instead, and every
//    rank takes the first: all ranks fail with the message PlanSave gives.
// 3. Local plan: each rank lays out its own data file from its replies
//    (PlanSave's file order) and describes, in "structure" messages, its
//    owned keys' records (the owner's skeleton) and the chunks it writes
//    (key, chunk, offset): for each key's owner the chunks of its keys, for
//    rank 0 the objects (LocalPlan::owner_structures, object_structure). The
//    replicas it holds stay in its own plan (RankFile::replicas, with
//    list_replicas): their checksums go to the keys' owners after the writes
//    (src/checkpoint/replica_owners.h).
// 4. At the save's commit (src/checkpoint/owner_commit.h) each owner
//    assembles its keys' records from the structures sent it (AssembleOwned),
//    rank 0 the objects'; AssemblePlan assembles everything in one place
//    (tests, benches).
//
// Writer choice: the owner takes its pieces largest first and gives each to
// its least-loaded holder (bytes the owner gave each rank so far); ties go to
// the first holder in rank order starting from position (XXH3-64(key) +
// chunk) mod k of the k holders (for an object, + its flat index), so that
// replicas of different keys are written by different ranks.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "src/plan/save_plan.h"

namespace shardpoint::internal_plan {

int KeyOwner(std::string_view key, int n);
// XXH3-64(key) mixed with each index value, mod N: ObjectOwner(key, {}, n) ==
// KeyOwner(key, n); never depends on the grid (objects whose grids disagree
// still meet at one owner, which reports them).
int ObjectOwner(std::string_view key, const Shape& index, int n);

// Messages from or to other ranks: (rank, bytes), in any order.
using Replies = std::vector<std::pair<int, std::string_view>>;

// What this rank sends each rank (indexed by owner; empty where nothing).
std::vector<std::string> EncodeShares(const Contribution& mine, int n);

// An owner's replies, (sender, bytes) for each sender whose share was not
// empty, and its skeleton for rank 0; or, on a plan error, `error_reply`,
// which it sends every rank instead. DataLoss for malformed shares only.
struct OwnerOutcome {
  std::vector<std::pair<int, std::string>> replies;
  std::string skeleton;
  std::string error_reply;  // non-empty: the plan failed here
};
Result<OwnerOutcome> PlanOwnedKeys(const Replies& received);

// The error path's names round (plan_exchange.cc, step 2b): a key no share
// named reaches its owner's errors as a placeholder (share_codec.h), so the
// holders send every rank its name and each rank renames the errors before
// taking the first. UnnamedInReplies: the placeholders' hashes in the
// replies (every rank receives the same errors, so all agree whether to run
// the round); NamesHeld: the names this rank holds of those hashes;
// NameErrorReplies: renames the error replies from every rank's NamesHeld.
std::vector<uint64_t> UnnamedInReplies(const std::vector<std::string>& replies);
std::string NamesHeld(const Contribution& mine, const std::vector<uint64_t>& hashes);
Status NameErrorReplies(const std::vector<std::string>& held, std::vector<std::string>* replies);

// This rank's part of the plan: its data file (file.items' source is the
// region or object index; record is -1; file 0 where it writes) and what it
// sends rank 0.
struct LocalPlan {
  RankFile file;  // with list_replicas, file.replicas: what it holds and another rank writes
  // With list_replicas: the indices in file.items of the chunks and objects
  // that other ranks hold replicas of (the owner's kRoleWriteShared).
  std::vector<uint32_t> shared;
  std::string path;       // "data/<rank>.safetensors"
  std::string structure;  // for AssemblePlan
  // The save's commit (src/checkpoint/owner_commit.h) assembles each key's
  // records at its owner and the objects' at rank 0, so the same items go
  // there instead: `item_owner[i]` is file.items[i]'s key's owner (KeyOwner),
  // or -1 for an object; `owner_structures` one structure per owner that this
  // rank writes chunks of or that is this rank and owns tensors (its entry
  // carries its tensor skeleton), sorted by owner; `object_structure` the
  // objects it owns (skeleton) and writes, for rank 0.
  std::vector<int32_t> item_owner;
  std::vector<std::pair<int, std::string>> owner_structures;
  std::string object_structure;
};
// `replies` from the owners of N ranks. The first plan error any owner sent
// (PlanError order) is returned: every rank receives the same errors, so
// every rank returns the same one, the one PlanSave returns.
Result<LocalPlan> PlanLocal(const Contribution& mine, const Replies& replies, int n,
                            std::string_view skeleton, int rank, bool list_replicas);

// The records of some keys and who writes them: an owner's tensors, or rank
// 0's objects, assembled from the structures the writers sent it.
struct OwnedPlan {
  // The records (checksums 0); files: the writers' data files, in rank order.
  internal_format::Manifest manifest;
  // (rank, its items of these records in the order it listed them; record
  // indexes manifest), sorted by rank.
  std::vector<std::pair<int, std::vector<WriteItem>>> writers;
  uint64_t total_bytes = 0;
};
// `structures`: (rank, structure), sorted by rank, without duplicates.
// InternalError where a structure names a piece no skeleton holds or a piece
// twice, or where a piece has no writer.
Result<OwnedPlan> AssembleOwned(const std::vector<std::pair<int, std::string_view>>& structures);

// The global plan from every rank's structure (indexed by rank; tests and
// benches):
// the manifest (checksums 0) and per rank its items with their records
// (header unset; no replicas: rank 0 does not compare them).
Result<SavePlan> AssemblePlan(const std::vector<std::string>& structures);

// Every step in one process (tests, bench): the plan rank 0 assembles, or
// the error every rank returns. `local` receives each rank's LocalPlan (with
// list_replicas, the replicas it holds).
Result<SavePlan> PlanSaveDistributed(const std::vector<Contribution>& ranks, bool list_replicas,
                                     std::vector<LocalPlan>* local = nullptr);

}  // namespace shardpoint::internal_plan
