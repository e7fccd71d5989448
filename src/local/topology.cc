#include "src/local/topology.h"

#include <unistd.h>

#include <algorithm>

#include "src/comm/agreed.h"

namespace shardpoint::internal_local {

int Topology::local_index(int rank) const {
  const std::vector<int>& rs = ranks_of[node_of_rank[rank]];
  return static_cast<int>(std::lower_bound(rs.begin(), rs.end(), rank) - rs.begin());
}

std::string HostName() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof buf - 1) != 0 || buf[0] == '\0') return "localhost";
  return buf;
}

Result<Topology> MakeTopology(const std::vector<std::string>& ids) {
  Topology t;
  for (size_t r = 0; r < ids.size(); ++r) {
    if (ids[r].empty() || ids[r].find_first_of("\t\n") != std::string::npos) {
      return InvalidArgumentError("rank " + std::to_string(r) + "'s node id '" + ids[r] +
                                  "' is empty or holds a tab or newline");
    }
  }
  t.nodes = ids;
  std::sort(t.nodes.begin(), t.nodes.end());
  t.nodes.erase(std::unique(t.nodes.begin(), t.nodes.end()), t.nodes.end());
  t.ranks_of.resize(t.nodes.size());
  for (size_t r = 0; r < ids.size(); ++r) {
    const int n = static_cast<int>(std::lower_bound(t.nodes.begin(), t.nodes.end(), ids[r]) -
                                   t.nodes.begin());
    t.node_of_rank.push_back(n);
    t.ranks_of[n].push_back(static_cast<int>(r));
  }
  return t;
}

Result<Topology> GatherTopology(Comm& comm, const std::string& node_id, const Status& local) {
  const std::string mine = node_id.empty() ? HostName() : node_id;
  std::vector<std::string> all;
  SP_RETURN_IF_ERROR(internal_comm::AllGatherAgreed(comm, local, mine, &all));
  return MakeTopology(all);
}

int EffectiveReplicas(const Topology& t, int replicas) {
  return std::max(0, std::min(replicas, static_cast<int>(t.nodes.size()) - 1));
}

std::vector<int> ReplicaTargets(const Topology& t, int rank, int replicas) {
  std::vector<int> out;
  const int n = static_cast<int>(t.nodes.size());
  const int node = t.node_of(rank);
  const int j = t.local_index(rank);
  for (int k = 1; k <= EffectiveReplicas(t, replicas); ++k) {
    const std::vector<int>& rs = t.ranks_of[(node + k) % n];
    out.push_back(rs[j % rs.size()]);
  }
  return out;
}

}  // namespace shardpoint::internal_local
