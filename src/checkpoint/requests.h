// The all-ranks check of a load's requested keys, shared by Load and
// LoadFromHf: which stored keys no rank requested, and one error naming both
// the keys some rank requested that are not stored and those no rank
// requested (so a strict load reports everything at once).
//
// Distributed by key, as the save's checks are (replica_owners.h): stored
// key i is owned by rank i % size, a missing key by the rank its name
// hashes to. Each rank sends every owner the numbers (and missing names) of
// its requests that the owner owns; each owner finds its keys no rank asked
// for and drops duplicate missing names; one all-gather of those findings
// gives every rank the same verdict. A rank sends and receives about its own
// share, never a byte per stored key per rank: at 65,536 ranks and 42,572
// stored keys (bench/plan_scale_sampled --experts 64) that all-gather was
// 2.8 GB per rank.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "shardpoint/comm.h"
#include "shardpoint/status.h"

namespace shardpoint::internal_checkpoint {

struct GatheredRequests {
  std::vector<std::string> missing;      // requested by some rank, not stored (sorted, unique)
  std::vector<std::string> unrequested;  // stored keys no rank requested (sorted, unique)
};

// Collective (an AllToAll carrying `local`, this rank's status so far, then
// an AllGather). The stored keys are numbered 0 to `count` - 1 alike on
// every rank; `wanted` holds the numbers this rank requests, `missing` its
// requested keys that are not stored, and `name_of(i)` names stored key i
// (called only for keys this rank owns). Every rank returns the same: the
// lowest failing rank's `local` error (AgreeOnStatus's rule), or the
// gathered requests.
Result<GatheredRequests> GatherRequests(Comm& comm, const Status& local, uint64_t count,
                                        const std::vector<uint64_t>& wanted,
                                        const std::vector<std::string>& missing,
                                        const std::function<std::string(uint64_t)>& name_of);

// Sorts `keys` and drops repeats.
void SortUnique(std::vector<std::string>* keys);

// 'a', 'b', ... (at most 10 named, then the count).
std::string KeyList(const std::vector<std::string>& keys);

// The strict-load error, or OK: NotFound when keys are missing (naming the
// unexpected keys too, if they are not allowed either), else InvalidArgument
// when keys are unexpected. `source` names the checkpoint or model.
Status RequestsError(const std::string& source, const std::vector<std::string>& missing,
                     bool allow_missing, const std::vector<std::string>& unexpected,
                     bool allow_unexpected);

}  // namespace shardpoint::internal_checkpoint
