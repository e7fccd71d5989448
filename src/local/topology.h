// Nodes and replica placement of the local tier.
//
// A node is the set of ranks that pass the same node id (default: the
// hostname); they share one local root. Nodes are numbered in the sorted
// order of their ids, so every rank computes the same numbering from the
// same gathered ids.
//
// Placement: the rank with index j among the ranks of node i sends its data
// file to nodes i+1, ..., i+r (mod the number of nodes N; r is
// min(replicas, N - 1)), to the rank with index j mod size there. So the r+1
// copies of a file lie on r+1 distinct nodes: a node never holds two copies,
// and losing any r nodes leaves one.
#pragma once

#include <string>
#include <vector>

#include "shardpoint/comm.h"

namespace shardpoint::internal_local {

struct Topology {
  std::vector<std::string> nodes;          // node ids, sorted, unique
  std::vector<int> node_of_rank;           // node index of each rank
  std::vector<std::vector<int>> ranks_of;  // ranks of each node, ascending
  int node_of(int rank) const { return node_of_rank[rank]; }
  int local_index(int rank) const;  // position of `rank` among its node's ranks
};

// The hostname (gethostname), or "localhost" where it fails.
std::string HostName();

// Builds the topology from every rank's node id (ids[r] for rank r).
// InvalidArgument naming the rank when an id is empty or holds a tab or
// newline (the replica map's separators).
Result<Topology> MakeTopology(const std::vector<std::string>& ids);

// Collective: all-gathers each rank's node id (empty = HostName()), with
// `local`, this rank's status so far: the lowest failing rank's error is
// every rank's (AllGatherAgreed), so a caller needs no agreement of its own.
Result<Topology> GatherTopology(Comm& comm, const std::string& node_id,
                                const Status& local = OkStatus());

// Number of copies on other nodes: min(replicas, nodes - 1), at least 0.
int EffectiveReplicas(const Topology& t, int replicas);

// The ranks that receive copies of `rank`'s file, one per replica node, in
// placement order.
std::vector<int> ReplicaTargets(const Topology& t, int rank, int replicas);

}  // namespace shardpoint::internal_local
