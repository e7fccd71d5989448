#include "src/checkpoint/cooperative.h"

#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include "src/base/guard.h"
#include "src/checkpoint/piece_message.h"
#include "src/geometry/convert.h"
#include "src/geometry/view_range.h"
#include "src/plan/load_plan.h"

namespace shardpoint::internal {
namespace {

// The assignment unit where nothing is verified (a DCP or HF source, or
// verify_checksums off): only the needed bytes inside a unit are read.
constexpr uint64_t kUnverifiedUnit = uint64_t{1} << 20;

// One rank's piece of a chunk.
struct Need {
  int rank = 0;
  int64_t piece = 0;  // index into that rank's plan.pieces
  Box in_chunk;
};

struct ChunkNeeds {
  int64_t tensor = 0, chunk = 0;
  uint64_t unit = 0;        // the assignment unit (bytes): a verification block
  uint64_t es = 0;          // stored element size
  std::vector<Need> needs;  // by rank, then in that rank's plan order
};

// Consecutive units of one chunk with the same ranks needing bytes in them
// and the same preferred readers (those needing at least half as much as
// the one that needs most).
struct Run {
  size_t chunk = 0;
  uint64_t k0 = 0, k1 = 0;  // units [k0, k1)
  std::vector<int> holders, preferred;
};

// Chunk-relative bytes [a, b), read by one rank.
struct Span {
  size_t chunk = 0;
  uint64_t a = 0, b = 0;
  int reader = 0;
  uint64_t send = 0;  // bytes the reader sends to the other ranks
};

// The flat elements [first, last) of `need`'s piece inside chunk bytes [a, b).
std::pair<int64_t, int64_t> FlatIn(const Shape& cs, const ChunkNeeds& cn, const Need& need,
                                   uint64_t a, uint64_t b) {
  const int64_t ea = static_cast<int64_t>(a / cn.es), eb = static_cast<int64_t>(b / cn.es);
  return {ElementsBefore(cs, need.in_chunk, ea), ElementsBefore(cs, need.in_chunk, eb)};
}

std::string EncodePlan(const LoadPlan& plan) {
  PieceMessage msg;
  for (size_t i = 0; i < plan.pieces.size(); ++i) {
    const ReadPiece& p = plan.pieces[i];
    if (p.nbytes == 0) continue;
    msg.pieces.push_back(SharedPiece{static_cast<int64_t>(i), p.tensor, p.chunk, p.in_chunk,
                                     static_cast<uint8_t>(p.dst_dtype), p.nbytes});
  }
  return EncodePieceMessage(msg);
}

// Every rank's pieces by chunk, in (tensor, chunk) order.
Status DecodePlans(const Manifest& m, const std::vector<std::string>& all, bool verify,
                   std::vector<ChunkNeeds>* out) {
  std::map<std::pair<int64_t, int64_t>, ChunkNeeds> by_chunk;
  for (int r = 0; r < static_cast<int>(all.size()); ++r) {
    SP_ASSIGN_OR_RETURN(PieceMessage msg, DecodePieceMessage(all[r], r));
    for (SharedPiece& p : msg.pieces) {
      const bool known = p.tensor < static_cast<int64_t>(m.tensors.size()) &&
                         p.chunk < static_cast<int64_t>(m.tensors[p.tensor].chunks.size());
      if (!known ||
          !ValidateBoxInShape(p.in_chunk, m.tensors[p.tensor].chunks[p.chunk].box.shape).ok() ||
          p.in_chunk.empty()) {
        return InternalError("cooperative load: rank " + std::to_string(r) +
                             " planned a piece outside the checkpoint's chunks");
      }
      ChunkNeeds& cn = by_chunk[{p.tensor, p.chunk}];
      if (cn.needs.empty()) {
        const ChunkRecord& c = m.tensors[p.tensor].chunks[p.chunk];
        cn.tensor = p.tensor;
        cn.chunk = p.chunk;
        cn.es = DTypeSize(m.tensors[p.tensor].dtype);
        cn.unit = verify ? VerifyBlock(m, c) : kUnverifiedUnit;
      }
      cn.needs.push_back(Need{r, p.piece, std::move(p.in_chunk)});
    }
  }
  for (auto& [key, cn] : by_chunk) out->push_back(std::move(cn));
  return OkStatus();
}

uint64_t UnitBytes(const ChunkRecord& c, uint64_t unit, uint64_t k0, uint64_t k1) {
  return std::min(c.nbytes, k1 * unit) - std::min(c.nbytes, k0 * unit);
}

// The runs of chunk `ci`; adds the bytes of units only one rank needs to
// that rank's load.
void RunsOfChunk(const Manifest& m, const std::vector<ChunkNeeds>& chunks, size_t ci,
                 std::vector<Run>* runs, std::vector<uint64_t>* load) {
  const ChunkNeeds& cn = chunks[ci];
  const ChunkRecord& c = m.tensors[cn.tensor].chunks[cn.chunk];
  const Shape& cs = c.box.shape;
  // Per unit, the bytes each rank needs in it (rank ascending).
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
  if (lo >= hi) return;
  std::vector<std::vector<std::pair<int, uint64_t>>> units(hi - lo);
  for (size_t i = 0; i < cn.needs.size(); ++i) {
    const Need& need = cn.needs[i];
    for (uint64_t k = extent[i].first; k < extent[i].second; ++k) {
      const auto [fa, fb] =
          FlatIn(cs, cn, need, k * cn.unit, std::min(c.nbytes, (k + 1) * cn.unit));
      if (fb <= fa) continue;
      auto& u = units[k - lo];
      const uint64_t bytes = static_cast<uint64_t>(fb - fa) * cn.es;
      if (!u.empty() && u.back().first == need.rank) {
        u.back().second += bytes;
      } else {
        u.push_back({need.rank, bytes});
      }
    }
  }
  Run cur;
  bool open = false;
  auto close = [&] {
    if (!open) return;
    if (cur.holders.size() == 1) (*load)[cur.holders[0]] += UnitBytes(c, cn.unit, cur.k0, cur.k1);
    runs->push_back(std::move(cur));
    cur = Run{};
    open = false;
  };
  for (uint64_t k = lo; k < hi; ++k) {
    const auto& u = units[k - lo];
    if (u.empty()) {
      close();
      continue;
    }
    std::vector<int> holders, preferred;
    uint64_t most = 0;
    for (const auto& [r, b] : u) most = std::max(most, b);
    for (const auto& [r, b] : u) {
      holders.push_back(r);
      if (2 * b >= most) preferred.push_back(r);
    }
    if (open && holders == cur.holders && preferred == cur.preferred) {
      cur.k1 = k + 1;
      continue;
    }
    close();
    cur = Run{ci, k, k + 1, std::move(holders), std::move(preferred)};
    open = true;
  }
  close();
}

// Units [k0, k1) of a run read by `reader`, as spans of at most `cap` bytes.
void AddSpans(const Manifest& m, const std::vector<ChunkNeeds>& chunks, size_t ci, uint64_t k0,
              uint64_t k1, int reader, uint64_t cap, std::vector<Span>* spans) {
  const ChunkNeeds& cn = chunks[ci];
  const ChunkRecord& c = m.tensors[cn.tensor].chunks[cn.chunk];
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

// Every rank computes the same spans: units one rank needs are its reads;
// the units of a shared run go to its preferred readers, cut into contiguous
// shares that bring the least loaded of them level (water filling).
std::vector<Span> AssignSpans(const Manifest& m, const std::vector<ChunkNeeds>& chunks, int n,
                              uint64_t cap) {
  std::vector<Run> runs;
  std::vector<uint64_t> load(n, 0);
  for (size_t ci = 0; ci < chunks.size(); ++ci) RunsOfChunk(m, chunks, ci, &runs, &load);
  std::vector<Span> spans;
  for (const Run& run : runs) {
    const ChunkNeeds& cn = chunks[run.chunk];
    const ChunkRecord& c = m.tensors[cn.tensor].chunks[cn.chunk];
    if (run.holders.size() == 1) {
      AddSpans(m, chunks, run.chunk, run.k0, run.k1, run.holders[0], cap, &spans);
      continue;
    }
    std::vector<int> s = run.preferred;
    std::stable_sort(s.begin(), s.end(), [&](int x, int y) { return load[x] < load[y]; });
    const uint64_t total = UnitBytes(c, cn.unit, run.k0, run.k1);
    // The level W that the `used` least loaded readers reach together.
    uint64_t sum = total, level = 0;
    size_t used = s.size();
    for (size_t i = 1; i <= s.size(); ++i) {
      sum += load[s[i - 1]];
      level = sum / i;
      if (i == s.size() || level <= load[s[i]]) {
        used = i;
        break;
      }
    }
    std::vector<uint64_t> bound(used);  // cumulative shares
    uint64_t cum = 0;
    for (size_t j = 0; j < used; ++j) {
      cum += level - std::min(level, load[s[j]]);
      bound[j] = j + 1 == used ? total : std::min(cum, total);
    }
    // Each unit to the reader whose share holds its middle byte.
    uint64_t k = run.k0, before = 0;
    while (k < run.k1) {
      const uint64_t ub = UnitBytes(c, cn.unit, k, k + 1);
      size_t j = 0;
      while (j + 1 < used && bound[j] <= before + ub / 2) ++j;
      uint64_t end = k + 1, bytes = ub;
      for (before += ub; end < run.k1; ++end) {
        const uint64_t next = UnitBytes(c, cn.unit, end, end + 1);
        size_t jj = 0;
        while (jj + 1 < used && bound[jj] <= before + next / 2) ++jj;
        if (jj != j) break;
        before += next;
        bytes += next;
      }
      AddSpans(m, chunks, run.chunk, k, end, s[j], cap, &spans);
      load[s[j]] += bytes;
      k = end;
    }
  }
  return spans;
}

// Rank `me`'s reads of spans [r0, r1): its own pieces' bytes in the spans it
// reads, and the other ranks' parts packed into send[rank], in span order,
// then each rank's plan order.
Status ReadRound(const Manifest& m, const LoadPlan& plan, const std::vector<ChunkNeeds>& chunks,
                 const std::vector<Span>& spans, size_t r0, size_t r1, int me, DataFiles* files,
                 ThreadPool* pool, const ReadOptions& options, std::vector<std::string>* send,
                 ReadStats* read, CooperativeStats* stats) {
  std::vector<ChunkSpan> mine;
  std::vector<PiecePart> parts;
  std::set<size_t> own_chunks;
  std::vector<uint64_t> size(send->size(), 0);
  for (int pass = 0; pass < 2; ++pass) {
    std::vector<uint64_t> at(send->size(), 0);
    for (size_t i = r0; i < r1; ++i) {
      const Span& sp = spans[i];
      if (sp.reader != me) continue;
      const ChunkNeeds& cn = chunks[sp.chunk];
      const Shape& cs = m.tensors[cn.tensor].chunks[cn.chunk].box.shape;
      if (pass == 0) mine.push_back(ChunkSpan{cn.tensor, cn.chunk, sp.a, sp.b});
      for (const Need& need : cn.needs) {
        const auto [fa, fb] = FlatIn(cs, cn, need, sp.a, sp.b);
        if (fb <= fa) continue;
        const uint64_t bytes = static_cast<uint64_t>(fb - fa) * cn.es;
        if (need.rank == me) {
          own_chunks.insert(sp.chunk);
        } else if (pass == 0) {
          size[need.rank] += bytes;
        } else {
          const DType dtype = m.tensors[cn.tensor].dtype;
          ReadPiece p;
          p.tensor = cn.tensor;
          p.chunk = cn.chunk;
          p.in_chunk = need.in_chunk;
          p.src_dtype = p.dst_dtype = dtype;
          p.nbytes = bytes;
          parts.push_back(
              PiecePart{std::move(p), sp.a, sp.b, fa, (*send)[need.rank].data() + at[need.rank]});
          at[need.rank] += bytes;
        }
      }
    }
    if (pass == 0) {
      for (size_t r = 0; r < send->size(); ++r) {
        (*send)[r].resize(size[r]);
        stats->bytes_sent += size[r];
      }
    }
  }
  std::vector<const ReadPiece*> own;
  for (size_t ci : own_chunks) {
    for (const Need& need : chunks[ci].needs) {
      if (need.rank == me) own.push_back(&plan.pieces[need.piece]);
    }
  }
  return ExecuteSpans(m, own, parts, mine, files, pool, options, read);
}

// Places what the other ranks sent for spans [r0, r1) (ReadRound's order).
Status PlaceRound(const Manifest& m, const LoadPlan& plan, const std::vector<ChunkNeeds>& chunks,
                  const std::vector<Span>& spans, size_t r0, size_t r1, int me,
                  const std::vector<std::string>& recv, CooperativeStats* stats) {
  std::vector<uint64_t> at(recv.size(), 0);
  std::vector<char> scratch;
  for (size_t i = r0; i < r1; ++i) {
    const Span& sp = spans[i];
    if (sp.reader == me) continue;
    const ChunkNeeds& cn = chunks[sp.chunk];
    const Shape& cs = m.tensors[cn.tensor].chunks[cn.chunk].box.shape;
    const std::string& from = recv[sp.reader];
    for (const Need& need : cn.needs) {
      if (need.rank != me) continue;
      const auto [fa, fb] = FlatIn(cs, cn, need, sp.a, sp.b);
      if (fb <= fa) continue;
      const uint64_t bytes = static_cast<uint64_t>(fb - fa) * cn.es;
      if (from.size() - at[sp.reader] < bytes) {
        return InternalError("cooperative load: rank " + std::to_string(sp.reader) + " sent " +
                             std::to_string(from.size()) + " bytes, fewer than planned");
      }
      const ReadPiece& p = plan.pieces[need.piece];
      const char* src = from.data() + at[sp.reader];
      if (p.src_dtype != p.dst_dtype) {
        scratch.resize(static_cast<size_t>(fb - fa) * DTypeSize(p.dst_dtype));
        ConvertElements(p.src_dtype, src, p.dst_dtype, scratch.data(), fb - fa);
        src = scratch.data();
      }
      ScatterFlatRange(p.dst, fa, fb, src);
      at[sp.reader] += bytes;
      stats->bytes_received += bytes;
    }
  }
  for (size_t r = 0; r < recv.size(); ++r) {
    if (at[r] != recv[r].size()) {
      return InternalError("cooperative load: rank " + std::to_string(r) + " sent " +
                           std::to_string(recv[r].size()) + " bytes, " + std::to_string(at[r]) +
                           " planned");
    }
  }
  return OkStatus();
}

}  // namespace

Status CooperativeLoad(const Manifest& m, const LoadPlan& plan, Comm& comm, DataFiles* files,
                       ThreadPool* pool, const ReadOptions& options, uint64_t round_bytes,
                       CooperativeStats* stats) {
  const int me = comm.rank(), n = comm.size();
  std::vector<std::string> all;
  SP_RETURN_IF_ERROR(comm.AllGather(EncodePlan(plan), &all));
  std::vector<ChunkNeeds> chunks;
  std::vector<Span> spans;
  Status s = Guarded("cooperative load: assigning the reads", [&]() -> Status {
    SP_RETURN_IF_ERROR(DecodePlans(m, all, options.verify_checksums, &chunks));
    spans = AssignSpans(m, chunks, n, std::max<uint64_t>(1, round_bytes / 4));
    return OkStatus();
  });
  all.clear();
  SP_RETURN_IF_ERROR(AgreeOnStatus(comm, s));

  // Rounds of spans whose sends stay within round_bytes (plus one span).
  for (size_t r0 = 0; r0 < spans.size();) {
    size_t r1 = r0;
    uint64_t round = 0;
    while (r1 < spans.size() && (r1 == r0 || round + spans[r1].send <= round_bytes)) {
      round += spans[r1].send;
      ++r1;
    }
    std::vector<std::string> send(n), recv;
    ReadStats read;
    s = Guarded("cooperative load: reading", [&] {
      return ReadRound(m, plan, chunks, spans, r0, r1, me, files, pool, options, &send, &read,
                       stats);
    });
    stats->bytes_read += read.bytes.load();
    stats->requests += read.requests.load();
    stats->bytes_needed += read.needed.load();
    SP_RETURN_IF_ERROR(AgreeOnStatus(comm, s));
    if (round > 0) {
      SP_RETURN_IF_ERROR(comm.AllToAll(send, &recv));
      send.clear();
      s = Guarded("cooperative load: placing received bytes",
                  [&] { return PlaceRound(m, plan, chunks, spans, r0, r1, me, recv, stats); });
      SP_RETURN_IF_ERROR(AgreeOnStatus(comm, s));
    }
    r0 = r1;
  }
  return OkStatus();
}

}  // namespace shardpoint::internal
