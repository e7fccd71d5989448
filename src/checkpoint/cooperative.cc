#include "src/checkpoint/cooperative.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "src/base/bytes.h"
#include "src/base/guard.h"
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
// needed twice by this rank. Encoded as: private bytes, count, then per piece
// its index and identity.
std::string EncodeShareable(const LoadPlan& plan, std::vector<bool>* shareable) {
  std::map<Identity, int> seen;
  for (const ReadPiece& p : plan.pieces) {
    if (p.src_dtype == p.dst_dtype) ++seen[IdentityOf(p)];
  }
  shareable->assign(plan.pieces.size(), false);
  uint64_t private_bytes = 0, count = 0;
  ByteWriter body;
  for (size_t i = 0; i < plan.pieces.size(); ++i) {
    const ReadPiece& p = plan.pieces[i];
    if (p.src_dtype != p.dst_dtype || seen[IdentityOf(p)] != 1) {
      private_bytes += p.nbytes;
      continue;
    }
    (*shareable)[i] = true;
    ++count;
    body.I64(static_cast<int64_t>(i));
    body.I64(p.tensor);
    body.I64(p.chunk);
    body.Ints(p.in_chunk.offset);
    body.Ints(p.in_chunk.shape);
    body.U8(static_cast<uint8_t>(p.dst_dtype));
    body.U64(p.nbytes);
  }
  ByteWriter w;
  w.U64(private_bytes);
  w.U64(count);
  w.Raw(body.str().data(), body.str().size());
  return std::move(w.str());
}

Status DecodeInto(const std::string& bytes, int rank, std::map<Identity, Group>* groups,
                  uint64_t* private_bytes) {
  ByteReader r(bytes, "cooperative load pieces of rank " + std::to_string(rank));
  uint64_t count;
  SP_RETURN_IF_ERROR(r.U64(private_bytes));
  SP_RETURN_IF_ERROR(r.Count(&count, 8 * 4 + 3));
  for (uint64_t i = 0; i < count; ++i) {
    int64_t piece;
    Identity id;
    uint64_t nbytes;
    SP_RETURN_IF_ERROR(r.I64(&piece));
    SP_RETURN_IF_ERROR(r.I64(&id.tensor));
    SP_RETURN_IF_ERROR(r.I64(&id.chunk));
    SP_RETURN_IF_ERROR(r.Ints(&id.in_chunk.offset));
    SP_RETURN_IF_ERROR(r.Ints(&id.in_chunk.shape));
    SP_RETURN_IF_ERROR(r.U8(&id.dtype));
    SP_RETURN_IF_ERROR(r.U64(&nbytes));
    Group& g = (*groups)[id];
    g.nbytes = nbytes;
    g.holders.push_back(Holder{rank, piece});
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
