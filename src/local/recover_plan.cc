#include "src/local/recover_plan.h"

#include <algorithm>
#include <map>

namespace shardpoint::internal_local {

Pending InitialPending(const UnitTable& ut, const Topology& t, const CopyState& copies,
                       const std::vector<std::vector<uint32_t>>& needs) {
  std::map<uint32_t, std::vector<int>> by_unit;
  for (size_t r = 0; r < needs.size(); ++r) {
    const int node = t.node_of(static_cast<int>(r));
    for (uint32_t u : needs[r]) {
      const bool good = copies.node_holds[node][ut.units[u].file] && !copies.bad.count({node, u});
      if (!good) by_unit[u].push_back(static_cast<int>(r));
    }
  }
  return Pending(by_unit.begin(), by_unit.end());
}

std::vector<Transfer> AssignServers(const UnitTable& ut, const Topology& t, const CopyState& copies,
                                    const Pending& pending, bool allow_persistent,
                                    std::vector<uint32_t>* lost) {
  std::vector<uint64_t> node_load(t.nodes.size(), 0), rank_load(t.node_of_rank.size(), 0);
  std::vector<Transfer> out;
  for (const auto& [u, receivers] : pending) {
    const Unit& unit = ut.units[u];
    int best = -1;
    for (size_t n = 0; n < t.nodes.size(); ++n) {
      const int node = static_cast<int>(n);
      if (!copies.node_holds[n][unit.file] || copies.bad.count({node, u})) continue;
      if (best < 0 || node_load[n] < node_load[best]) best = node;
    }
    Transfer x;
    x.unit = u;
    x.receivers = receivers;
    if (best >= 0) {
      x.source = best;
      x.server = t.ranks_of[best][0];
      for (int r : t.ranks_of[best]) {
        if (rank_load[r] < rank_load[x.server]) x.server = r;
      }
      node_load[best] += unit.nbytes;
    } else if (allow_persistent && !copies.bad.count({kPersistent, u})) {
      x.source = kPersistent;
      x.server = receivers.front();
    } else {
      lost->push_back(u);
      continue;
    }
    rank_load[x.server] += unit.nbytes;
    out.push_back(std::move(x));
  }
  return out;
}

std::vector<std::vector<size_t>> PackRounds(
    const UnitTable& ut, const std::vector<Transfer>& transfers, uint64_t round_bytes,
    const std::function<bool(const Transfer&)>& unbuffered) {
  std::map<int, std::vector<size_t>> per_server;
  std::vector<std::vector<size_t>> rounds;
  for (size_t i = 0; i < transfers.size(); ++i) {
    if (unbuffered && unbuffered(transfers[i])) {
      if (rounds.empty()) rounds.resize(1);
      rounds[0].push_back(i);
    } else {
      per_server[transfers[i].server].push_back(i);
    }
  }
  for (const auto& [server, list] : per_server) {
    size_t k = 0;
    uint64_t bytes = 0;
    for (size_t i : list) {
      const uint64_t n = ut.units[transfers[i].unit].nbytes;
      if (bytes > 0 && bytes + n > round_bytes) {
        ++k;
        bytes = 0;
      }
      if (rounds.size() <= k) rounds.resize(k + 1);
      rounds[k].push_back(i);
      bytes += n;
    }
  }
  return rounds;
}

}  // namespace shardpoint::internal_local
