// The all-ranks check of a load's requested keys, shared by Load and
// LoadFromHf: which stored keys no rank requested, and one error naming both
// the keys some rank requested that are not stored and those no rank
// requested (so a strict load reports everything at once).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "shardpoint/comm.h"
#include "shardpoint/status.h"

namespace shardpoint::internal_checkpoint {

struct GatheredRequests {
  std::vector<std::string> missing;  // requested by some rank, not stored (sorted, unique)
  std::vector<size_t> unrequested;   // indices of `wanted` no rank set
};

// Collective (one AllGather, carrying `local`: this rank's status so far).
// `wanted` has one byte per stored key (nonzero: this rank requests it; the
// same length on every rank); `missing` are this rank's requested keys that
// are not stored. Every rank returns the same: the lowest failing rank's
// `local` error (AgreeOnStatus's rule), or the gathered requests.
Result<GatheredRequests> GatherRequests(Comm& comm, const Status& local, const std::string& wanted,
                                        const std::vector<std::string>& missing);

// 'a', 'b', ... (at most 10 named, then the count).
std::string KeyList(const std::vector<std::string>& keys);

// The strict-load error, or OK: NotFound when keys are missing (naming the
// unexpected keys too, if they are not allowed either), else InvalidArgument
// when keys are unexpected. `source` names the checkpoint or model.
Status RequestsError(const std::string& source, const std::vector<std::string>& missing,
                     bool allow_missing, const std::vector<std::string>& unexpected,
                     bool allow_unexpected);

}  // namespace shardpoint::internal_checkpoint
