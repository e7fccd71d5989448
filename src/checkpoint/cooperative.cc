#include "src/checkpoint/cooperative.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "src/base/guard.h"
#include "src/checkpoint/piece_message.h"
#include "src/geometry/view.h"

namespace shardpoint::internal {
namespace {

// What makes two ranks' pieces the same bytes.
struct Identity {
  int64_t tensor = 0, chunk = 0;
  Box in_chunk;
  uint8_t dtype = 0;
  bool operator<(const Identity& o) const {
    return std::tie(tensor, chunk, in_chunk.offset, in_chunk.shape, dtype) <
           std::tie(o.tensor, o.chunk, o.in_chunk.offset, o.in_chunk.shape, o.dtype);
  }
};

Identity IdentityOf(const ReadPiece& p) {
  return Identity{p.tensor, p.chunk, p.in_chunk, static_cast<uint8_t>(p.dst_dtype)};
}

struct Holder {
  int rank;
  int64_t piece;  // index into that rank's plan.pieces
};

struct Group {
  uint64_t nbytes = 0;
  std::vector<Holder> holders;  // ascending rank
  int reader = -1;              // index into holders
};

// This rank's shareable pieces: stored dtype == requested dtype, and not
// needed twice by this rank (src/checkpoint/piece_message.h).
std::string EncodeShareable(const LoadPlan& plan, std::vector<bool>* shareable) {
  std::map<Identity, int> seen;
  for (const ReadPiece& p : plan.pieces) {
    if (p.src_dtype == p.dst_dtype) ++seen[IdentityOf(p)];
  }
  shareable->assign(plan.pieces.size(), false);
  PieceMessage msg;
  for (size_t i = 0; i < plan.pieces.size(); ++i) {
    const ReadPiece& p = plan.pieces[i];
    if (p.src_dtype != p.dst_dtype || seen[IdentityOf(p)] != 1) {
      msg.private_bytes += p.nbytes;
      continue;
    }
    (*shareable)[i] = true;
    msg.pieces.push_back(SharedPiece{static_cast<int64_t>(i), p.tensor, p.chunk, p.in_chunk,
                                     static_cast<uint8_t>(p.dst_dtype), p.nbytes});
  }
  return EncodePieceMessage(msg);
}

Status DecodeInto(const std::string& bytes, int rank, std::map<Identity, Group>* groups,
                  uint64_t* private_bytes) {
  SP_ASSIGN_OR_RETURN(PieceMessage msg, DecodePieceMessage(bytes, rank));
  *private_bytes = msg.private_bytes;
  for (SharedPiece& p : msg.pieces) {
    Group& g = (*groups)[Identity{p.tensor, p.chunk, std::move(p.in_chunk), p.dtype}];
    g.nbytes = p.nbytes;
    g.holders.push_back(Holder{rank, p.piece});
  }
  return OkStatus();
}

// Largest first, to the holder with the fewest bytes read so far.
void AssignReaders(std::vector<Group*>& shared, std::vector<uint64_t> load) {
  std::vector<Group*> order = shared;
  std::stable_sort(order.begin(), order.end(),
                   [](const Group* a, const Group* b) { return a->nbytes > b->nbytes; });
  for (Group* g : order) {
    int best = 0;
    for (int h = 1; h < static_cast<int>(g->holders.size()); ++h) {
      if (load[g->holders[h].rank] < load[g->holders[best].rank]) best = h;
    }
    g->reader = best;
    load[g->holders[best].rank] += g->nbytes;
  }
}

}  // namespace

Status CooperativeLoad(const Manifest& m, const LoadPlan& plan, Comm& comm, DataFiles* files,
                       ThreadPool* pool, const ReadOptions& options, uint64_t round_bytes,
                       CooperativeStats* stats) {
  const int me = comm.rank(), n = comm.size();
  std::vector<bool> shareable;
  std::vector<std::string> all;
  SP_RETURN_IF_ERROR(comm.AllGather(EncodeShareable(plan, &shareable), &all));
  std::map<Identity, Group> groups;
  std::vector<uint64_t> load(n, 0);
  Status s;
  s = Guarded("cooperative load: decoding the plans", [&]() -> Status {
    for (int r = 0; r < n; ++r) SP_RETURN_IF_ERROR(DecodeInto(all[r], r, &groups, &load[r]));
    return OkStatus();
  });
  all.clear();
  SP_RETURN_IF_ERROR(AgreeOnStatus(comm, s));

  // Groups one rank needs alone are that rank's reads.
  std::vector<Group*> shared;
  for (auto& [id, g] : groups) {
    if (g.holders.size() == 1) {
      load[g.holders[0].rank] += g.nbytes;
    } else {
      shared.push_back(&g);
    }
  }
  AssignReaders(shared, load);

  // 1. Reads: everything this rank needs, except shared pieces another reads.
  std::vector<bool> skip(plan.pieces.size(), false);
  for (const Group* g : shared) {
    for (int h = 0; h < static_cast<int>(g->holders.size()); ++h) {
      if (h != g->reader && g->holders[h].rank == me) skip[g->holders[h].piece] = true;
    }
  }
  LoadPlan mine;
  for (size_t i = 0; i < plan.pieces.size(); ++i) {
    if (skip[i]) continue;
    mine.pieces.push_back(plan.pieces[i]);
    mine.bytes += plan.pieces[i].nbytes;
  }
  ReadStats read;
  s = Guarded("cooperative load: reading",
              [&] { return ExecuteLoadPlan(m, mine, files, pool, options, &read); });
  stats->bytes_read += read.bytes.load();
  stats->requests += read.requests.load();
  stats->bytes_needed += read.needed.load();
  SP_RETURN_IF_ERROR(AgreeOnStatus(comm, s));

  // 2. Rounds of AllToAll, in the (deterministic) order of `shared`.
  size_t next = 0;
  while (next < shared.size()) {
    size_t end = next;
    uint64_t round = 0;
    while (end < shared.size() && (end == next || round <= round_bytes)) {
      round += shared[end]->nbytes * (shared[end]->holders.size() - 1);
      ++end;
    }
    std::vector<std::string> send(n), recv;
    // Agreed before the exchange, so that a rank that cannot pack its
    // pieces stops every rank with its own error.
    Status built = Guarded("cooperative load: packing pieces to send", [&]() -> Status {
      for (size_t gi = next; gi < end; ++gi) {
        const Group& g = *shared[gi];
        if (g.holders[g.reader].rank != me) continue;
        const View& src = plan.pieces[g.holders[g.reader].piece].dst;
        for (int h = 0; h < static_cast<int>(g.holders.size()); ++h) {
          if (h == g.reader) continue;
          std::string& out = send[g.holders[h].rank];
          const size_t at = out.size();
          out.resize(at + g.nbytes);
          StridedCopy(ContiguousView(out.data() + at, src.elem_size, src.shape), src);
          stats->bytes_sent += g.nbytes;
        }
      }
      return OkStatus();
    });
    SP_RETURN_IF_ERROR(AgreeOnStatus(comm, built));
    SP_RETURN_IF_ERROR(comm.AllToAll(send, &recv));
    send.clear();
    std::vector<size_t> cursor(n, 0);
    s = OkStatus();
    for (size_t gi = next; gi < end && s.ok(); ++gi) {
      const Group& g = *shared[gi];
      const int from = g.holders[g.reader].rank;
      for (int h = 0; h < static_cast<int>(g.holders.size()); ++h) {
        if (h == g.reader || g.holders[h].rank != me) continue;
        const View& dst = plan.pieces[g.holders[h].piece].dst;
        if (recv[from].size() - cursor[from] < g.nbytes) {
          s = InternalError("cooperative load: rank " + std::to_string(from) + " sent " +
                            std::to_string(recv[from].size()) + " bytes, fewer than planned");
          break;
        }
        StridedCopy(dst,
                    ContiguousView(recv[from].data() + cursor[from], dst.elem_size, dst.shape));
        cursor[from] += g.nbytes;
        stats->bytes_received += g.nbytes;
      }
    }
    SP_RETURN_IF_ERROR(AgreeOnStatus(comm, s));
    next = end;
  }
  return OkStatus();
}

}  // namespace shardpoint::internal
