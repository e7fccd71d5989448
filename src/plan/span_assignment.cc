#include "src/plan/span_assignment.h"

#include <algorithm>

#include "src/plan/load_plan.h"

using shardpoint::internal_format::ChunkRecord;
using shardpoint::internal_format::Manifest;

namespace shardpoint::internal_plan {
namespace {

// The ranks needing bytes of one unit (a verification block), ascending, and
// its preferred readers: those needing at least half as much of it as the
// rank that needs most.
struct UnitNeeds {
  std::vector<int> holders, preferred;
};

// The units of one chunk that some rank needs: [lo, lo + units.size()).
struct ChunkUnits {
  uint64_t lo = 0;
  std::vector<UnitNeeds> units;
};

uint64_t UnitBytes(const ChunkRecord& c, uint64_t unit, uint64_t k0, uint64_t k1) {
  return std::min(c.nbytes, k1 * unit) - std::min(c.nbytes, k0 * unit);
}

const ChunkRecord& RecordOf(const Manifest& m, const ChunkNeeds& cn) {
  return m.tensors[cn.tensor].chunks[cn.chunk];
}

ChunkUnits UnitsOf(const Manifest& m, const ChunkNeeds& cn) {
  const ChunkRecord& c = RecordOf(m, cn);
  const Shape& cs = c.box.shape;
  uint64_t lo = UINT64_MAX, hi = 0;
  std::vector<std::pair<uint64_t, uint64_t>> extent;  // per need: its units [first, last)
  for (const Need& need : cn.needs) {
    const RunPattern rp = RunsOf(cs, need.in_chunk);
    const uint64_t first = static_cast<uint64_t>(RunStart(cs, need.in_chunk, rp, 0)) * cn.es;
    const uint64_t last =
        static_cast<uint64_t>(RunStart(cs, need.in_chunk, rp, rp.runs - 1) + rp.run_elements) *
        cn.es;
    extent.push_back({first / cn.unit, (last - 1) / cn.unit + 1});
    lo = std::min(lo, extent.back().first);
    hi = std::max(hi, extent.back().second);
  }
  ChunkUnits out;
  if (lo >= hi) return out;
  out.lo = lo;
  // Per unit, the bytes each rank needs in it (rank ascending).
  std::vector<std::vector<std::pair<int, uint64_t>>> bytes(hi - lo);
  for (size_t i = 0; i < cn.needs.size(); ++i) {
    const Need& need = cn.needs[i];
    for (uint64_t k = extent[i].first; k < extent[i].second; ++k) {
      const auto [fa, fb] =
          FlatIn(cs, cn, need, k * cn.unit, std::min(c.nbytes, (k + 1) * cn.unit));
      if (fb <= fa) continue;
      auto& u = bytes[k - lo];
      const uint64_t n = static_cast<uint64_t>(fb - fa) * cn.es;
      if (!u.empty() && u.back().first == need.rank) {
        u.back().second += n;
      } else {
        u.push_back({need.rank, n});
      }
    }
  }
  out.units.resize(hi - lo);
  for (size_t k = 0; k < bytes.size(); ++k) {
    uint64_t most = 0;
    for (const auto& [r, n] : bytes[k]) most = std::max(most, n);
    for (const auto& [r, n] : bytes[k]) {
      out.units[k].holders.push_back(r);
      if (2 * n >= most) out.units[k].preferred.push_back(r);
    }
  }
  return out;
}

// Units [k0, k1) of chunk ci read by `reader`, as spans of at most `cap` bytes.
void AddSpans(const Manifest& m, const std::vector<ChunkNeeds>& chunks, size_t ci, uint64_t k0,
              uint64_t k1, int reader, uint64_t cap, std::vector<Span>* spans) {
  const ChunkNeeds& cn = chunks[ci];
  const ChunkRecord& c = RecordOf(m, cn);
  const uint64_t per = std::max<uint64_t>(1, cap / cn.unit);
  for (uint64_t k = k0; k < k1; k += per) {
    Span s{ci, k * cn.unit, std::min(c.nbytes, std::min(k1, k + per) * cn.unit), reader, 0};
    for (const Need& need : cn.needs) {
      if (need.rank == reader) continue;
      const auto [fa, fb] = FlatIn(c.box.shape, cn, need, s.a, s.b);
      if (fb > fa) s.send += static_cast<uint64_t>(fb - fa) * cn.es;
    }
    spans->push_back(s);
  }
}

}  // namespace

// The flat elements [first, last) of `need`'s piece inside chunk bytes [a, b).
std::pair<int64_t, int64_t> FlatIn(const Shape& cs, const ChunkNeeds& cn, const Need& need,
                                   uint64_t a, uint64_t b) {
  const int64_t ea = static_cast<int64_t>(a / cn.es), eb = static_cast<int64_t>(b / cn.es);
  return {ElementsBefore(cs, need.in_chunk, ea), ElementsBefore(cs, need.in_chunk, eb)};
}

std::vector<Span> AssignSpans(const Manifest& m, const std::vector<ChunkNeeds>& chunks, int n,
                              uint64_t cooperative_round_bytes) {
  const uint64_t cap = std::max<uint64_t>(1, cooperative_round_bytes / 4);
  std::vector<ChunkUnits> units;
  std::vector<uint64_t> load(n, 0);
  uint64_t total = 0;
  for (const ChunkNeeds& cn : chunks) {
    units.push_back(UnitsOf(m, cn));
    const ChunkUnits& cu = units.back();
    const ChunkRecord& c = RecordOf(m, cn);
    for (size_t k = 0; k < cu.units.size(); ++k) {
      const uint64_t ub = UnitBytes(c, cn.unit, cu.lo + k, cu.lo + k + 1);
      if (cu.units[k].holders.size() == 1) load[cu.units[k].holders[0]] += ub;
      if (!cu.units[k].holders.empty()) total += ub;
    }
  }
  const uint64_t slack = std::clamp<uint64_t>(total / (16 * static_cast<uint64_t>(n)), 1, cap);
  std::vector<Span> spans;
  int prev = -1;
  for (size_t ci = 0; ci < chunks.size(); ++ci) {
    const ChunkNeeds& cn = chunks[ci];
    const ChunkRecord& c = RecordOf(m, cn);
    const ChunkUnits& cu = units[ci];
    // A chunk that two ranks share a unit of is exchanged anyway: the run
    // that reaches it goes on through it (within the balance) if its reader
    // needs some of the chunk, units that it does not need included, so that
    // reads stay long where several ranks' needs interleave (a matrix loaded
    // cut along the other dim). A chunk whose units each one rank needs is
    // read by its holders.
    bool shared = false;
    std::vector<bool> holds(n, false);  // needs some unit of this chunk
    for (const UnitNeeds& u : cu.units) {
      shared = shared || u.holders.size() > 1;
      for (int r : u.holders) holds[r] = true;
    }
    uint64_t start = 0;
    int reader = -1;
    for (size_t k = 0; k <= cu.units.size(); ++k) {
      int next = -1;
      if (k < cu.units.size() && !cu.units[k].holders.empty()) {
        const UnitNeeds& u = cu.units[k];
        if (u.holders.size() == 1 && !shared) {
          next = u.holders[0];
        } else {
          const uint64_t ub = UnitBytes(c, cn.unit, cu.lo + k, cu.lo + k + 1);
          if (u.holders.size() == 1) load[u.holders[0]] -= ub;  // counted for it above
          int least = u.preferred[0];
          for (int r : u.preferred) {
            if (load[r] < load[least]) least = r;
          }
          const bool may = prev >= 0 && ((shared && holds[prev]) ||
                                         std::find(u.preferred.begin(), u.preferred.end(), prev) !=
                                             u.preferred.end());
          const bool stay = may && load[prev] + ub <= load[least] + std::max(slack, ub);
          next = stay ? prev : least;
          load[next] += ub;
        }
      }
      if (next != reader) {
        if (reader >= 0) AddSpans(m, chunks, ci, cu.lo + start, cu.lo + k, reader, cap, &spans);
        start = k;
        reader = next;
      }
      if (next >= 0) prev = next;
    }
  }
  return spans;
}

}  // namespace shardpoint::internal_plan
