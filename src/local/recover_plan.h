// Which copy serves each byte of a recovery: pure, the same on every rank
// from the same gathered inputs.
//
// A rank reads a unit (units.h) it needs from its own node's copy when its
// node holds the unit's file and the copy passed its checksum. Every other
// needing rank is a receiver: the unit is sent to it by a server, a rank on
// a node holding a copy not known to be bad (the node, then its rank, with
// the fewest bytes assigned so far: the load spreads over holders); where no
// such node is left, the lowest receiver reads the unit from the persistent
// checkpoint (source kPersistent) and sends it to the other receivers, so the
// job reads each such unit from persistent storage once.
#pragma once

#include <cstdint>
#include <functional>
#include <set>
#include <utility>
#include <vector>

#include "src/local/topology.h"
#include "src/local/units.h"

namespace shardpoint::internal_local {

// The source of a persistent read, in place of a node index.
inline constexpr int kPersistent = -1;

struct Transfer {
  uint32_t unit = 0;
  int source = 0;              // node index, or kPersistent
  int server = 0;              // the rank that reads and sends it
  std::vector<int> receivers;  // ascending; a persistent server may be one of them
};

// Pending work: a unit and the ranks that still need it sent.
using Pending = std::vector<std::pair<uint32_t, std::vector<int>>>;

struct CopyState {
  std::vector<std::vector<char>> node_holds;  // [node][file]: a committed copy
  std::set<std::pair<int, uint32_t>> bad;     // (node or kPersistent, unit): failed its checksum
};

// The receivers of every unit: needs[r] holds the units rank r needs
// (ascending).
Pending InitialPending(const UnitTable& ut, const Topology& t, const CopyState& copies,
                       const std::vector<std::vector<uint32_t>>& needs);

// One transfer per pending unit. `allow_persistent`: else a unit no good
// copy holds goes to `lost` instead.
std::vector<Transfer> AssignServers(const UnitTable& ut, const Topology& t, const CopyState& copies,
                                    const Pending& pending, bool allow_persistent,
                                    std::vector<uint32_t>* lost);

// Rounds: round k holds, per server, its transfers while their bytes stay
// within `round_bytes` (at least one). Indices into `transfers`. A transfer
// `unbuffered` says holds no memory for its round (its bytes are sent where
// they lie) goes in round 0 and counts for nothing.
std::vector<std::vector<size_t>> PackRounds(
    const UnitTable& ut, const std::vector<Transfer>& transfers, uint64_t round_bytes,
    const std::function<bool(const Transfer&)>& unbuffered = nullptr);

}  // namespace shardpoint::internal_local
