#include "src/checkpoint/cooperative.h"

#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <string_view>
#include <tuple>
#include <utility>

#include "src/base/guard.h"
#include "src/checkpoint/cooperative_exchange.h"
#include "src/checkpoint/piece_message.h"
#include "src/comm/agreed.h"
#include "src/comm/shm_exchange.h"
#include "src/comm/transport.h"
#include "src/geometry/convert.h"
#include "src/geometry/view_range.h"
#include "src/io/raw_buffer.h"
#include "src/io/thread_pool.h"
#include "src/plan/load_plan.h"
#include "src/plan/span_assignment.h"

using shardpoint::internal_base::Guarded;
using shardpoint::internal_comm::ShmExchange;
using shardpoint::internal_format::ChunkRecord;
using shardpoint::internal_format::Manifest;
using shardpoint::internal_format::VerifyBlock;
using shardpoint::internal_geometry::ConvertElements;
using shardpoint::internal_geometry::ScatterFlatRange;
using shardpoint::internal_io::Ahead;
using shardpoint::internal_plan::AssignSpans;
using shardpoint::internal_plan::ChunkNeeds;
using shardpoint::internal_plan::FlatIn;
using shardpoint::internal_plan::kUnverifiedUnit;
using shardpoint::internal_plan::LoadPlan;
using shardpoint::internal_plan::Need;
using shardpoint::internal_plan::ReadPiece;
using shardpoint::internal_plan::Span;

namespace shardpoint::internal_checkpoint {
namespace {

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

// Every rank's pieces by chunk, in file order.
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
  // File order, so that runs continue across chunks stored back to back.
  std::stable_sort(out->begin(), out->end(), [&](const ChunkNeeds& x, const ChunkNeeds& y) {
    const ChunkRecord& cx = m.tensors[x.tensor].chunks[x.chunk];
    const ChunkRecord& cy = m.tensors[y.tensor].chunks[y.chunk];
    return std::tie(cx.file, cx.offset) < std::tie(cy.file, cy.offset);
  });
  return OkStatus();
}

// Rank `me`'s reads of spans [r0, r1): its own pieces' bytes in the spans it
// reads, and the other ranks' parts packed into rank r's payload, in span
// order, then each rank's plan order, from byte 1 (byte 0 carries the status:
// AllToAllAgreed).
Status ReadRound(const Manifest& m, const LoadPlan& plan, const std::vector<ChunkNeeds>& chunks,
                 const std::vector<Span>& spans, size_t r0, size_t r1, int me, int n,
                 DataFiles* files, ThreadPool* pool, const ReadOptions& options, SendBuffers* send,
                 ReadStats* read, uint64_t* sent) {
  std::vector<ChunkSpan> mine;
  std::vector<PiecePart> parts;
  std::set<size_t> own_chunks;
  std::vector<uint64_t> size(static_cast<size_t>(n), 0);
  std::vector<char*> out(static_cast<size_t>(n), nullptr);
  for (int pass = 0; pass < 2; ++pass) {
    std::vector<uint64_t> at(static_cast<size_t>(n), 1);
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
          parts.push_back(PiecePart{std::move(p), sp.a, sp.b, fa, out[need.rank] + at[need.rank]});
          at[need.rank] += bytes;
        }
      }
    }
    if (pass == 0) {
      std::vector<uint64_t> payload(static_cast<size_t>(n));
      for (int r = 0; r < n; ++r) {
        payload[r] = 1 + size[r];
        *sent += size[r];
      }
      send->Layout(payload);
      for (int r = 0; r < n; ++r) out[r] = send->payload(r);
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

// Places what the other ranks sent for spans [r0, r1) (ReadRound's order,
// from byte 1).
Status PlaceRound(const Manifest& m, const LoadPlan& plan, const std::vector<ChunkNeeds>& chunks,
                  const std::vector<Span>& spans, size_t r0, size_t r1, int me,
                  const std::vector<std::string_view>& recv, CooperativeStats* stats) {
  std::vector<uint64_t> at(recv.size(), 1);
  internal_io::RawBuffer scratch;
  for (size_t i = r0; i < r1; ++i) {
    const Span& sp = spans[i];
    if (sp.reader == me) continue;
    const ChunkNeeds& cn = chunks[sp.chunk];
    const Shape& cs = m.tensors[cn.tensor].chunks[cn.chunk].box.shape;
    const std::string_view from = recv[sp.reader];
    for (const Need& need : cn.needs) {
      if (need.rank != me) continue;
      const auto [fa, fb] = FlatIn(cs, cn, need, sp.a, sp.b);
      if (fb <= fa) continue;
      const uint64_t bytes = static_cast<uint64_t>(fb - fa) * cn.es;
      if (from.size() - at[sp.reader] < bytes) {
        return InternalError("cooperative load: rank " + std::to_string(sp.reader) + " sent " +
                             std::to_string(from.size() - 1) + " bytes, fewer than planned");
      }
      const ReadPiece& p = plan.pieces[need.piece];
      const char* src = from.data() + at[sp.reader];
      if (p.src_dtype != p.dst_dtype) {
        char* conv = scratch.Resize(static_cast<size_t>(fb - fa) * DTypeSize(p.dst_dtype));
        ConvertElements(p.src_dtype, src, p.dst_dtype, conv, fb - fa);
        src = conv;
      }
      ScatterFlatRange(p.dst, fa, fb, src);
      at[sp.reader] += bytes;
      stats->bytes_received += bytes;
    }
  }
  for (size_t r = 0; r < recv.size(); ++r) {
    if (at[r] != recv[r].size()) {
      return InternalError("cooperative load: rank " + std::to_string(r) + " sent " +
                           std::to_string(recv[r].size() - 1) + " bytes, " +
                           std::to_string(at[r] - 1) + " planned");
    }
  }
  return OkStatus();
}

// Rank `me`'s groups by the round that completes them: element r + 1 holds
// those whose last bytes round r places (the last round with a span of a
// chunk holding one of their pieces), element 0 those of no piece.
// `chunk_last`: the last round with a span of each chunk (-1: none).
std::vector<std::vector<int>> GroupsByRound(const std::vector<ChunkNeeds>& chunks,
                                            const std::vector<int64_t>& chunk_last, size_t rounds,
                                            int me, const LoadGroups& groups) {
  std::vector<int64_t> last(static_cast<size_t>(groups.count), -1);
  for (size_t c = 0; c < chunks.size() && groups.count > 0; ++c) {
    for (const Need& need : chunks[c].needs) {
      if (need.rank != me) continue;
      int64_t& l = last[static_cast<size_t>(groups.of_piece[static_cast<size_t>(need.piece)])];
      l = std::max(l, chunk_last[c]);
    }
  }
  std::vector<std::vector<int>> out(rounds + 1);
  for (int g = 0; g < groups.count; ++g) {
    out[static_cast<size_t>(last[static_cast<size_t>(g)] + 1)].push_back(g);
  }
  return out;
}

// Spans [r0, r1) of a round, and the bytes they send.
struct Round {
  size_t r0, r1;
  uint64_t send;
};

// The most bytes each rank sends in one round.
std::vector<uint64_t> RoundSends(const std::vector<Span>& spans, const std::vector<Round>& rounds,
                                 int n) {
  std::vector<uint64_t> most(static_cast<size_t>(n), 0);
  for (const Round& r : rounds) {
    std::vector<uint64_t> sends(static_cast<size_t>(n), 0);
    for (size_t i = r.r0; i < r.r1; ++i)
      sends[static_cast<size_t>(spans[i].reader)] += spans[i].send;
    for (int q = 0; q < n; ++q) most[q] = std::max(most[q], sends[q]);
  }
  return most;
}

}  // namespace

Status CooperativeLoad(const Manifest& m, const LoadPlan& plan, Comm& comm, DataFiles* files,
                       ThreadPool* pool, const ReadOptions& options,
                       uint64_t cooperative_round_bytes, const LoadGroups& groups,
                       CooperativeStats* stats) {
  const int me = comm.rank(), n = comm.size();
  std::vector<std::string> all;
  SP_RETURN_IF_ERROR(comm.AllGather(EncodePlan(plan), &all));
  std::vector<ChunkNeeds> chunks;
  std::vector<Span> spans;
  Status s = Guarded("cooperative load: assigning the reads", [&]() -> Status {
    SP_RETURN_IF_ERROR(DecodePlans(m, all, options.verify_checksums, &chunks));
    spans = AssignSpans(m, chunks, n, cooperative_round_bytes);
    return OkStatus();
  });
  all.clear();
  SP_RETURN_IF_ERROR(AgreeOnStatus(comm, s));

  // Rounds of spans whose sends stay within cooperative_round_bytes (plus one span), and
  // within 1/8 of all sends (at least 8 MiB), so that reads and exchanges
  // overlap in a small load too.
  uint64_t all_sends = 0;
  for (const Span& sp : spans) all_sends += sp.send;
  const uint64_t round_bytes =
      std::min(cooperative_round_bytes, std::max(all_sends / 8, uint64_t{8} << 20));
  std::vector<Round> rounds;
  for (size_t r0 = 0; r0 < spans.size();) {
    Round r{r0, r0, 0};
    while (r.r1 < spans.size() && (r.r1 == r0 || r.send + spans[r.r1].send <= round_bytes)) {
      r.send += spans[r.r1].send;
      ++r.r1;
    }
    rounds.push_back(r);
    r0 = r.r1;
  }
  // Same-node ranks' bytes move through shared memory where the Comm's own
  // transport does not (src/comm/shm_exchange.h); each rank's segment half
  // holds the most it sends in one round.
  std::unique_ptr<ShmExchange> shm;
  if (internal_comm::WantsShmExchange(comm)) {
    SP_ASSIGN_OR_RETURN(shm, ShmExchange::Open(comm, RoundSends(spans, rounds, n), {}));
  }
  // The thread comms: payloads in raw memory, placed from the senders' own.
  // A set of payloads holds the most this rank sends in a round, and status bytes.
  auto* const views_comm = shm ? nullptr : dynamic_cast<internal_comm::ViewAllToAll*>(&comm);
  const uint64_t raw_bytes = views_comm ? RoundSends(spans, rounds, n)[me] + n : 0;
  // Each group is announced after the round that completes it (no piece: first).
  std::vector<int64_t> chunk_last(chunks.size(), -1);
  for (size_t ri = 0; ri < rounds.size(); ++ri) {
    for (size_t i = rounds[ri].r0; i < rounds[ri].r1; ++i) {
      chunk_last[spans[i].chunk] = static_cast<int64_t>(ri);  // rounds ascend
    }
  }
  const std::vector<std::vector<int>> completes =
      GroupsByRound(chunks, chunk_last, rounds.size(), me, groups);
  auto announce = [&](size_t round_plus_one) {
    for (int g : completes[round_plus_one]) groups.announce(g);
  };
  announce(0);
  // A round's reads, run while the previous round's bytes move. A rank that
  // failed reads no more (`skip`): it only takes part in the collectives
  // until its error is every rank's.
  struct Reads {
    SendBuffers send;
    ReadStats read;
    uint64_t sent = 0;
    Status status;
  };
  auto read_round = [&](const Round& r, bool skip, Reads* out) {
    out->send.Init(n, raw_bytes);
    if (skip) return;
    out->status = Guarded("cooperative load: reading", [&] {
      return ReadRound(m, plan, chunks, spans, r.r0, r.r1, me, n, files, pool, options, &out->send,
                       &out->read, &out->sent);
    });
  };
  std::unique_ptr<Reads> cur(new Reads);
  if (!rounds.empty()) read_round(rounds[0], false, cur.get());
  // The send buffers of the round exchanged last and the receive buffers,
  // refilled by later rounds: fresh memory for every round costs page faults
  // on each copy (on a VM whose host took freed pages back, seconds per GiB).
  SendBuffers spare;
  std::vector<std::string> recv;
  std::vector<std::string_view> views;  // the payloads, in recv or in peers' segments
  // This rank's first failure (reading or placing), not yet every rank's: it
  // travels in the status byte of the next exchange (one collective per round,
  // not an agreement beside each exchange), else in the agreement at the end.
  Status pending;
  for (size_t i = 0; i < rounds.size(); ++i) {
    stats->bytes_read += cur->read.bytes.load();
    stats->requests += cur->read.requests.load();
    stats->bytes_needed += cur->read.needed.load();
    stats->bytes_sent += cur->sent;
    if (pending.ok()) pending = cur->status;
    // The next round's reads go ahead (into other destination bytes than
    // this round's placing) on the pool: at most two rounds' sends are held.
    // Declared after `next`, `ahead` is waited for first on return.
    std::unique_ptr<Reads> next;
    std::unique_ptr<Ahead> ahead;
    if (i + 1 < rounds.size()) {
      next.reset(new Reads);
      next->send = std::move(spare);
      Reads* out = next.get();
      const Round& r = rounds[i + 1];
      const bool skip = !pending.ok();
      ahead =
          std::make_unique<Ahead>(pool, [&read_round, &r, skip, out] { read_round(r, skip, out); });
    }
    if (rounds[i].send > 0) {
      auto place = [&](const std::vector<std::string_view>& got) {
        return Guarded("cooperative load: placing received bytes", [&] {
          return PlaceRound(m, plan, chunks, spans, rounds[i].r0, rounds[i].r1, me, got, stats);
        });
      };
      Status unpacked;
      if (views_comm) {
        Status placed;
        SP_RETURN_IF_ERROR(cur->send.ExchangeViews(*views_comm, pending, place, &placed));
        pending = placed;
      } else {
        if (shm) {
          SP_RETURN_IF_ERROR(
              shm->AllToAllAgreed(comm, pending, cur->send.strings(), &recv, &unpacked, &views));
        } else {
          SP_RETURN_IF_ERROR(
              internal_comm::AllToAllAgreed(comm, pending, cur->send.strings(), &recv));
          views.assign(recv.begin(), recv.end());
        }
        pending = !unpacked.ok() ? unpacked : place(views);
      }
      spare = std::move(cur->send);
    }
    // Round i's bytes are placed. Its groups are announced once the next
    // round's reads are done too: with no read in flight, a callback may
    // look at any tensor. A rank whose bytes are not all right announces
    // nothing more.
    if (ahead) ahead->Wait();
    if (pending.ok()) announce(i + 1);
    cur = std::move(next);
  }
  return AgreeOnStatus(comm, pending);
}

}  // namespace shardpoint::internal_checkpoint
