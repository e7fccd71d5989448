// Replication of a committed local checkpoint to other nodes: the step that
// follows the local save (on the calling thread, or in an AsyncSaver's
// background thread after the commit).
//
//   1. rank 0 reads the manifest from its node and broadcasts it; the first
//      rank of every other node writes it there (manifest.tmp, rename);
//                                                         (broadcast)
//   2. in rounds, each rank with a data file sends its next slice (whole
//      verification units, at most round_bytes; topology.h says to whom)
//      to its replica ranks; a receiver checks every unit of a slice
//      against the manifest's checksum before writing the slice at its
//      offset;                                           (AllToAll per round)
//   3. the ranks agree; then the first rank of each node writes the replica
//      map (replicas.tmp, rename): the node's commit point;   (agree)
//   4. the ranks agree that every node committed.                 (agree)
// A failure anywhere is every rank's error and leaves no replica map
// written in step 3 (a crash inside step 3 leaves some nodes committed: each
// of their copies was verified, so they count). Nothing is fsynced.
#pragma once

#include <string>

#include "shardpoint/comm.h"
#include "shardpoint/local_tier.h"
#include "src/local/node_storage.h"
#include "src/local/topology.h"

namespace shardpoint::internal_local {

// `dir`: the local checkpoint's path as every rank names it ("/iter_...").
// REQUIRES: the local save of `dir` committed (rank 0's node holds its
// manifest); `node` is this rank's node storage.
Status Replicate(Comm& comm, const Topology& t, Storage* node, const std::string& dir,
                 const LocalTierOptions& options, LocalSaveStats* stats);

}  // namespace shardpoint::internal_local
