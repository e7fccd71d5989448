// LocalLoad and LatestLocal (local_tier.h): recovery from the local tier.
//
//   1. the topology, and what each node holds of the iteration (its first
//      rank reads its replica map, inventory.h);              (all-gather)
//   2. the lowest rank on a node with a committed copy broadcasts the
//      manifest;                                               (broadcast)
//   3. the load pipeline (load_source.h) checks the requests and plans
//      each rank's load, then runs steps 3 and 4 in place of its reads of
//      the tensors (placement.h): each rank lists the verification units
//      (units.h) its plan needs, starts reading those its node holds on a
//      thread of its own (once, straight into the destination tensors,
//      every block verified; a unit that fails its checksum there is bad
//      on that node) and all-gathers its needs;
//   4. every rank computes the same transfers (recover_plan.h) for the
//      units its node lacks, and runs them in rounds of one AllToAll while
//      its own reads go on: a server reads each unit from its node's copy
//      (or the persistent checkpoint) straight into its message and checks
//      it there; a receiver checks it again where it arrives and places it
//      from there into its tensors, in the round it arrives: between
//      thread ranks in the sender's message itself (ViewAllToAll, no copy
//      by the Comm), else in the Comm's receive buffer (send and receive
//      buffers are reused by every round: a pass's memory is one round's
//      messages). A unit that fails on either side marks that copy bad.
//      At the end of a pass (the first waits for the rank's own reads)
//      the ranks all-gather the copies marked bad, those of the own reads
//      included, and plan again for the units they failed, until none
//      fails or no copy is left (a DataLoss error naming the unit);
//                     (all-gather, AllToAll per round, all-gather per pass)
//   5. the pipeline reads the objects from the node's copy with the object
//      units received laid over it (overlay.h), verified.
// A recovery that fails after step 3 leaves the bytes it placed in the
// tensors, as a failed Load does.
// Every local step is Guarded and its error travels to the next agreement.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "shardpoint/local_tier.h"
#include "src/base/bytes.h"
#include "src/base/guard.h"
#include "src/checkpoint/load_source.h"
#include "src/comm/agreed.h"
#include "src/comm/thread_comm.h"
#include "src/format/checksum.h"
#include "src/io/path.h"
#include "src/local/inventory.h"
#include "src/local/node_storage.h"
#include "src/local/overlay.h"
#include "src/local/placement.h"
#include "src/local/recover_plan.h"
#include "src/local/topology.h"
#include "src/local/units.h"
#include "src/plan/load_plan.h"
#include "src/source/manifest_read.h"

using shardpoint::internal_base::ByteReader;
using shardpoint::internal_base::ByteWriter;
using shardpoint::internal_base::Guarded;
using shardpoint::internal_format::Checksum64;
using shardpoint::internal_format::DecodeManifest;
using shardpoint::internal_format::kManifestName;
using shardpoint::internal_format::Manifest;
using shardpoint::internal_format::ObjectRecord;
using shardpoint::internal_io::JoinPath;
using shardpoint::internal_local::Arrived;
using shardpoint::internal_local::AssignServers;
using shardpoint::internal_local::CommittedIterations;
using shardpoint::internal_local::CopyState;
using shardpoint::internal_local::GatherTopology;
using shardpoint::internal_local::InitialPending;
using shardpoint::internal_local::IterDir;
using shardpoint::internal_local::kPersistent;
using shardpoint::internal_local::NodeCopy;
using shardpoint::internal_local::OverlayFiles;
using shardpoint::internal_local::OverlayStorage;
using shardpoint::internal_local::PackRounds;
using shardpoint::internal_local::Pending;
using shardpoint::internal_local::Placer;
using shardpoint::internal_local::ReadNodeCopy;
using shardpoint::internal_local::RootedStorage;
using shardpoint::internal_local::Topology;
using shardpoint::internal_local::Transfer;
using shardpoint::internal_local::Unit;
using shardpoint::internal_local::UnitName;
using shardpoint::internal_local::UnitsOf;
using shardpoint::internal_local::UnitTable;
using shardpoint::internal_source::ReadManifestBytes;

namespace shardpoint {
namespace {

std::string EncodeCopy(const NodeCopy& c) {
  ByteWriter w;
  w.U8(c.committed);
  w.U64(c.all.size());
  for (const std::string& f : c.all) w.Str(f);
  w.U64(c.held.size());
  for (const std::string& f : c.held) w.Str(f);
  return std::move(w.str());
}

Result<NodeCopy> DecodeCopy(const std::string& bytes, int rank) {
  ByteReader r(bytes, "local tier inventory from rank " + std::to_string(rank));
  NodeCopy c;
  uint8_t committed = 0;
  SP_RETURN_IF_ERROR(r.U8(&committed));
  c.committed = committed != 0;
  for (std::vector<std::string>* v : {&c.all, &c.held}) {
    uint64_t n = 0;
    SP_RETURN_IF_ERROR(r.Count(&n, 4));
    v->resize(n);
    for (std::string& s : *v) SP_RETURN_IF_ERROR(r.Str(&s));
  }
  SP_RETURN_IF_ERROR(r.ExpectEnd());
  return c;
}

std::string EncodeUnits(const std::vector<uint32_t>& a, const std::vector<uint32_t>& b) {
  ByteWriter w;
  for (const std::vector<uint32_t>* v : {&a, &b}) {
    w.U64(v->size());
    w.Raw(v->data(), v->size() * 4);
  }
  return std::move(w.str());
}

Status DecodeUnits(const std::string& bytes, int rank, size_t num_units, std::vector<uint32_t>* a,
                   std::vector<uint32_t>* b) {
  ByteReader r(bytes, "local tier needs from rank " + std::to_string(rank));
  for (std::vector<uint32_t>* v : {a, b}) {
    uint64_t n = 0;
    SP_RETURN_IF_ERROR(r.Count(&n, 4));
    v->resize(n);
    SP_RETURN_IF_ERROR(r.Raw(v->data(), n * 4));
    for (uint32_t u : *v) {
      if (u >= num_units)
        return DataLossError("local tier: rank " + std::to_string(rank) + " names unit " +
                             std::to_string(u) + " of " + std::to_string(num_units));
    }
  }
  return r.ExpectEnd();
}

// The state of one recovery on this rank.
struct Recovery {
  Recovery(Comm& c, const Topology& top, Storage* n, Storage* p, std::string d, std::string pd)
      : comm(c), t(top), node(n), persistent(p), dir(std::move(d)), persistent_dir(std::move(pd)) {}
  Comm& comm;
  const Topology& t;
  Storage* node;  // this rank's node storage
  Storage* persistent;
  std::string dir;  // "/iter_..."
  std::string persistent_dir;
  std::string manifest_bytes;
  Manifest m;
  UnitTable ut;
  CopyState copies;
  std::vector<std::vector<uint32_t>> needs;  // per rank
  OverlayFiles overlay;                      // the node's copy, and the object units received
  std::unique_ptr<Manifest> persistent_manifest_checked;  // set once compared
  LoadResult result;
  Placer* placer = nullptr;  // set by step 3; used by the own reads' thread too
  // Object units received (small): the pipeline reads them after the
  // exchange through `overlay`.
  std::deque<std::string> kept_objects;
  Arrived arrived;   // units that reached this rank in the current round
  std::string self;  // units this rank reads for itself in the round
  // Write positions in the round's messages and in `self`: the buffers are
  // sized for the round up front (Reserve) and written in place, so that
  // bytes a round reuses are not zero-filled first (std::string::resize
  // fills only what it grows).
  std::vector<size_t> out_at;
  size_t self_at = 0;
};

// Notes a verified unit that reached this rank: a tensor unit is placed
// with the round's others; an object unit is kept for the pipeline.
void Arrive(Recovery& x, uint32_t u, const char* bytes) {
  const Unit& unit = x.ut.units[u];
  if (x.placer->IsTensor(u)) {
    x.arrived.emplace_back(u, bytes);
    return;
  }
  const std::string& kept = x.kept_objects.emplace_back(bytes, unit.nbytes);
  x.overlay.units[unit.file][unit.offset] = kept;
}

// Step 1. Per node: whether it committed, the files it holds.
Result<std::vector<NodeCopy>> GatherCopies(Comm& comm, const Topology& t, Storage* node,
                                           const std::string& dir) {
  Result<NodeCopy> mine = NodeCopy{};
  if (t.local_index(comm.rank()) == 0) {
    mine = Guarded("local load: reading this node's copy", [&] { return ReadNodeCopy(node, dir); });
  }
  std::vector<std::string> all;
  SP_RETURN_IF_ERROR(internal_comm::AllGatherAgreed(
      comm, mine.status(), mine.ok() ? EncodeCopy(*mine) : std::string(), &all));
  std::vector<NodeCopy> per_node(t.nodes.size());
  for (size_t n = 0; n < t.nodes.size(); ++n) {
    const int leader = t.ranks_of[n][0];
    SP_ASSIGN_OR_RETURN(per_node[n], DecodeCopy(all[leader], leader));
  }
  return per_node;
}

// The units of chunk blocks a plan's pieces need, and of the requested
// objects; sorted, unique.
std::vector<uint32_t> NeededUnits(const Manifest& m, const UnitTable& ut,
                                  const internal_plan::LoadPlan& plan, const State& state) {
  std::vector<uint32_t> out;
  auto units_in = [&](uint32_t file, uint64_t a, uint64_t b) {  // file bytes [a, b)
    const auto first = ut.units.begin() + ut.file_begin[file];
    const auto last = ut.units.begin() + ut.file_begin[file + 1];
    auto it =
        std::upper_bound(first, last, a, [](uint64_t x, const Unit& u) { return x < u.offset; });
    if (it != first) --it;
    for (; it != last && it->offset < b; ++it) {
      if (it->offset + it->nbytes > a) out.push_back(static_cast<uint32_t>(it - ut.units.begin()));
    }
  };
  for (const internal_plan::ReadPiece& p : plan.pieces) {
    const internal_format::ChunkRecord& c = m.tensors[p.tensor].chunks[p.chunk];
    const uint64_t es = DTypeSize(p.src_dtype);
    const uint64_t block = internal_format::VerifyBlock(m, c);
    const Shape& cs = c.box.shape;
    for (uint64_t at = 0; at < c.nbytes; at += block) {
      const uint64_t end = std::min(c.nbytes, at + block);
      const int64_t n = internal_plan::ElementsBefore(cs, p.in_chunk, end / es) -
                        internal_plan::ElementsBefore(cs, p.in_chunk, at / es);
      if (n > 0) units_in(c.file, c.offset + at, c.offset + end);
    }
  }
  for (const Object& o : state.objects) {
    for (const ObjectRecord& r : m.objects) {
      if (r.key == o.key && r.index == o.index && r.nbytes > 0) {
        units_in(r.file, r.offset, r.offset + r.nbytes);
      }
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

// The files of one directory, opened on first use (one thread at a time).
struct FileCache {
  Storage* storage;
  std::string dir;
  std::map<uint32_t, std::unique_ptr<ReadableFile>> open;
};

// Reads unit u into dst (u.nbytes) and checks it against its checksum.
Status ReadUnitInto(FileCache& files, const Manifest& m, const Unit& u, char* dst) {
  std::unique_ptr<ReadableFile>& f = files.open[u.file];
  if (!f) {
    SP_ASSIGN_OR_RETURN(f, files.storage->NewReadableFile(JoinPath(files.dir, m.files[u.file])));
  }
  SP_RETURN_IF_ERROR(f->ReadAt(u.offset, u.nbytes, dst));
  if (Checksum64(dst, u.nbytes) != u.checksum) {
    return DataLossError(UnitName(m, u) + ": checksum mismatch");
  }
  return OkStatus();
}

// The same into *bytes, reused from unit to unit (fresh memory costs a
// page fault per page).
Status ReadUnit(FileCache& files, const Manifest& m, const Unit& u, std::string* bytes) {
  bytes->resize(u.nbytes);
  return ReadUnitInto(files, m, u, bytes->data());
}

// Step 3's own-node part: the units this rank needs that its node holds,
// read from the node's copy on a thread of their own (OwnReads) while the
// peer rounds of pass 0 run on the rank's thread. The tensor units are
// placed as they are read (once, every block verified); should that fail,
// unit by unit, to tell the bad ones. Object units are only checked (the
// pipeline reads them again).
struct OwnOutcome {
  Status status;              // an error other than a bad copy (an exception)
  std::vector<uint32_t> bad;  // units whose node copy failed (read errors included: no copy)
  uint64_t bytes_local = 0;   // verified bytes of the units that passed
};

OwnOutcome ReadOwn(const Recovery& x, internal_checkpoint::DataFiles* files,
                   const std::vector<uint32_t>& tensor_units,
                   const std::vector<uint32_t>& object_units) {
  const Manifest& m = x.m;
  const UnitTable& ut = x.ut;
  Placer* placer = x.placer;
  OwnOutcome out;
  out.status = Guarded("local load: reading this node's copy", [&] {
    FileCache local{x.node, x.dir, {}};
    std::string scratch;
    for (uint32_t u : object_units) {
      if (ReadUnit(local, m, ut.units[u], &scratch).ok()) {
        out.bytes_local += ut.units[u].nbytes;
      } else {
        out.bad.push_back(u);
      }
    }
    const bool all_ok = placer->FromFiles(files, tensor_units).ok();
    for (uint32_t u : tensor_units) {
      if (all_ok || placer->FromFiles(files, {u}).ok()) {
        out.bytes_local += ut.units[u].nbytes;
      } else {
        out.bad.push_back(u);
      }
    }
    std::sort(out.bad.begin(), out.bad.end());
    return OkStatus();
  });
  return out;
}

// The own node's reads on a thread of their own, joined by Join() or the
// destructor (everything they use must outlive this). Where no thread can
// be made, Join() runs them.
class OwnReads {
 public:
  explicit OwnReads(std::function<OwnOutcome()> fn) : fn_(std::move(fn)) {
    try {
      thread_ = std::thread([this] { outcome_ = fn_(); });
    } catch (...) {  // no thread: run on the rank's thread at Join()
    }
  }
  ~OwnReads() { Join(); }
  OwnReads(const OwnReads&) = delete;
  OwnReads& operator=(const OwnReads&) = delete;
  // Waits for the reads (runs them, if no thread was made); their outcome.
  const OwnOutcome& Join() {
    if (thread_.joinable()) {
      thread_.join();
    } else if (fn_) {
      outcome_ = fn_();
    }
    fn_ = nullptr;
    return outcome_;
  }

 private:
  std::function<OwnOutcome()> fn_;
  OwnOutcome outcome_;
  std::thread thread_;
};

// A message of the exchange: u32 unit, u32 source, u8 ok, then the unit's
// bytes when ok.
constexpr size_t kHeader = 9;

// Copies n bytes to the message to rank r at its write position.
void Put(Recovery& x, std::vector<std::string>* send, int r, const void* data, size_t n) {
  std::memcpy((*send)[r].data() + x.out_at[r], data, n);
  x.out_at[r] += n;
}

void PutHeader(Recovery& x, std::vector<std::string>* send, int r, uint32_t unit, int source,
               bool ok) {
  char h[kHeader];
  const uint32_t src = static_cast<uint32_t>(source);
  std::memcpy(h, &unit, 4);
  std::memcpy(h + 4, &src, 4);
  h[8] = ok ? 1 : 0;
  Put(x, send, r, h, kHeader);
}

// Reads transfer tr's unit (checked) where it is first wanted: straight
// into the message to its first receiver other than this rank, else into
// x.self (reserved for the round). Returns the read's status; *bytes points
// at the unit when it is ok.
Status ReadForTransfer(Recovery& x, const Transfer& tr, FileCache& files,
                       std::vector<std::string>* send, const char** bytes) {
  const Unit& unit = x.ut.units[tr.unit];
  const int me = x.comm.rank();
  const auto other =
      std::find_if(tr.receivers.begin(), tr.receivers.end(), [&](int r) { return r != me; });
  if (other == tr.receivers.end()) {       // this rank is the only receiver
    char* at = x.self.data() + x.self_at;  // sized for the round (Reserve)
    Status read = ReadUnitInto(files, x.m, unit, at);
    if (read.ok()) {
      x.self_at += unit.nbytes;
      Arrive(x, tr.unit, at);
    }
    *bytes = at;
    return read;
  }
  std::string& buf = (*send)[*other];
  const size_t header = x.out_at[*other];
  PutHeader(x, send, *other, tr.unit, tr.source, true);
  char* at = buf.data() + x.out_at[*other];  // sized for the round (Reserve)
  Status read = ReadUnitInto(files, x.m, unit, at);
  if (!read.ok()) {
    buf[header + 8] = 0;
    return read;
  }
  x.out_at[*other] += unit.nbytes;
  *bytes = at;
  return read;
}

// Step 4, one transfer served by this rank: appends its messages to `send`,
// keeps what this rank itself receives, notes a bad copy. The unit is read
// once, into the first receiver's message; the others copy it from there.
Status Serve(Recovery& x, const Transfer& tr, FileCache& node_files, FileCache& pers_files,
             std::vector<std::string>* send, std::vector<std::pair<int, uint32_t>>* newly_bad) {
  const Unit& unit = x.ut.units[tr.unit];
  const bool persistent = tr.source == kPersistent;
  if (persistent && !x.persistent_manifest_checked) {
    SP_ASSIGN_OR_RETURN(std::string theirs, ReadManifestBytes(x.persistent, x.persistent_dir));
    if (theirs != x.manifest_bytes) {
      return FailedPreconditionError("local load: the persistent checkpoint '" + x.persistent_dir +
                                     "' is not the local checkpoint '" + x.dir +
                                     "' (their manifests differ)");
    }
    x.persistent_manifest_checked = std::make_unique<Manifest>();
  }
  const char* bytes = nullptr;
  const Status read = ReadForTransfer(x, tr, persistent ? pers_files : node_files, send, &bytes);
  if (read.ok() && persistent) x.result.bytes_persistent += unit.nbytes;
  if (!read.ok()) newly_bad->emplace_back(tr.source, tr.unit);
  const int me = x.comm.rank();
  const auto first =
      std::find_if(tr.receivers.begin(), tr.receivers.end(), [&](int r) { return r != me; });
  for (auto r = tr.receivers.begin(); r != tr.receivers.end(); ++r) {
    if (r == first) continue;  // its message holds the read
    if (*r == me) {
      if (read.ok() && first != tr.receivers.end()) Arrive(x, tr.unit, bytes);
      continue;
    }
    PutHeader(x, send, *r, tr.unit, tr.source, read.ok());
    if (read.ok()) Put(x, send, *r, bytes, unit.nbytes);
  }
  return OkStatus();
}

// Step 4, what this rank received in a round: each unit checked in the
// receive buffer (reused by every round), then placed from there.
Status Receive(Recovery& x, const std::vector<std::string_view>& recv,
               std::vector<std::pair<int, uint32_t>>* newly_bad) {
  for (size_t s = 0; s < recv.size(); ++s) {
    const std::string_view in = recv[s];
    for (size_t at = 0; at < in.size();) {
      if (in.size() - at < kHeader) {
        return DataLossError("local tier units from rank " + std::to_string(s) + ": truncated");
      }
      uint32_t u = 0, source = 0;
      std::memcpy(&u, in.data() + at, 4);
      std::memcpy(&source, in.data() + at + 4, 4);
      const bool ok = in[at + 8] != 0;
      at += kHeader;
      if (u >= x.ut.units.size()) return DataLossError("local tier: unit out of range");
      const Unit& unit = x.ut.units[u];
      const int src = static_cast<int>(source);
      if (!ok) continue;  // the server marked the copy bad itself
      if (in.size() - at < unit.nbytes) return DataLossError("local tier: truncated unit");
      const char* bytes = in.data() + at;
      at += unit.nbytes;
      if (Checksum64(bytes, unit.nbytes) != unit.checksum) {
        newly_bad->emplace_back(src, u);
        continue;
      }
      x.result.bytes_received += unit.nbytes;
      if (src != kPersistent) x.result.bytes_peer += unit.nbytes;
      Arrive(x, u, bytes);
    }
  }
  return OkStatus();
}

// One round's AllToAll; `take` runs on what this rank received. Thread
// ranks (the thread comms' ViewAllToAll) read it in place, in the senders'
// messages, valid only while `take` runs: the lost bytes are not copied by
// the Comm. Other Comms copy into *recv, reused by every round.
Status ExchangeRound(Comm& comm, const std::vector<std::string>& send,
                     std::vector<std::string>* recv,
                     const std::function<void(const std::vector<std::string_view>&)>& take) {
  if (auto* views = dynamic_cast<internal_comm::ViewAllToAll*>(&comm)) {
    const std::vector<std::string_view> out(send.begin(), send.end());
    return views->AllToAllViews(out, [&](const std::vector<std::string_view>& in) {
      take(in);
      return OkStatus();
    });
  }
  SP_RETURN_IF_ERROR(comm.AllToAll(send, recv));
  take(std::vector<std::string_view>(recv->begin(), recv->end()));
  return OkStatus();
}

// The bytes this rank sends each other rank in one round, and reads for
// itself: the buffers sized before the round, so they never reallocate
// within it (`arrived` points into them).
void Reserve(Recovery& x, const std::vector<Transfer>& transfers, const std::vector<size_t>& round,
             std::vector<std::string>* send) {
  std::vector<size_t> bytes(send->size(), 0);
  for (size_t i : round) {
    if (transfers[i].server != x.comm.rank()) continue;
    for (int r : transfers[i].receivers) bytes[r] += kHeader + x.ut.units[transfers[i].unit].nbytes;
  }
  // Sized, not cleared: what a buffer had from the last round is written
  // over; only growth is zero-filled. Seal() cuts them to what was written.
  for (size_t r = 0; r < bytes.size(); ++r) (*send)[r].resize(bytes[r]);
  x.out_at.assign(bytes.size(), 0);
  if (x.self.size() < bytes[x.comm.rank()]) x.self.resize(bytes[x.comm.rank()]);
  x.self_at = 0;
  x.arrived.clear();
}

// After this rank served its part of a round: each message cut to what was
// written into it (a failed read writes only its header).
void Seal(Recovery& x, std::vector<std::string>* send) {
  for (size_t r = 0; r < send->size(); ++r) (*send)[r].resize(x.out_at[r]);
}

Status LostError(const Recovery& x, const std::vector<uint32_t>& lost, bool persistent) {
  std::string what = UnitName(x.m, x.ut.units[lost.front()]);
  if (lost.size() > 1) what += " and " + std::to_string(lost.size() - 1) + " more units";
  return DataLossError("local load of '" + x.dir + "': no good copy of " + what +
                       " survives on any node" +
                       (persistent ? ", nor in the persistent checkpoint '" + x.persistent_dir + "'"
                                   : ", and no persistent checkpoint was given"));
}

// What a rank reports after a pass: the copies that failed in its rounds
// (source, unit), then, after pass 0, the units its node's copy failed in
// its own reads.
std::string EncodeBad(const std::vector<std::pair<int, uint32_t>>& newly_bad,
                      const std::vector<uint32_t>& own_bad) {
  ByteWriter w;
  w.U64(newly_bad.size());
  for (const auto& [src, u] : newly_bad) {
    w.U32(static_cast<uint32_t>(src));
    w.U32(u);
  }
  w.U64(own_bad.size());
  w.Raw(own_bad.data(), own_bad.size() * 4);
  return std::move(w.str());
}

Status DecodeBad(const std::string& bytes, int rank, size_t num_units,
                 std::vector<std::pair<int, uint32_t>>* failed, std::vector<uint32_t>* own_bad) {
  ByteReader r(bytes, "local tier bad copies from rank " + std::to_string(rank));
  uint64_t n = 0;
  SP_RETURN_IF_ERROR(r.Count(&n, 8));
  failed->resize(n);
  for (auto& [src, u] : *failed) {
    uint32_t s = 0;
    SP_RETURN_IF_ERROR(r.U32(&s));
    SP_RETURN_IF_ERROR(r.U32(&u));
    src = static_cast<int>(s);
  }
  SP_RETURN_IF_ERROR(r.Count(&n, 4));
  own_bad->resize(n);
  SP_RETURN_IF_ERROR(r.Raw(own_bad->data(), n * 4));
  for (uint32_t u : *own_bad) {
    if (u >= num_units)
      return DataLossError("local tier: rank " + std::to_string(rank) + " names unit " +
                           std::to_string(u) + " of " + std::to_string(num_units));
  }
  return r.ExpectEnd();
}

// Step 4: the passes. Pass 0 runs while this rank's own reads (`own`) do,
// and its agreement waits for them: a unit a rank's node copy failed is
// pending for that rank in pass 1, from another copy.
Status RunPasses(Recovery& x, const LocalTierOptions& o, OwnReads& own) {
  const bool persistent = !x.persistent_dir.empty();
  Pending pending = InitialPending(x.ut, x.t, x.copies, x.needs);
  FileCache node_files{x.node, x.dir, {}}, pers_files{x.persistent, x.persistent_dir, {}};
  const int me = x.comm.rank();
  for (size_t pass = 0; pass == 0 || !pending.empty(); ++pass) {
    // Each pass marks at least one more copy bad, and each unit has at most
    // one copy per node and one persistent: a bound that a bug cannot pass.
    if (pass > x.t.nodes.size() + 1) {
      return InternalError("local load: copies still failing after " + std::to_string(pass) +
                           " passes");
    }
    std::vector<uint32_t> lost;
    const std::vector<Transfer> transfers =
        AssignServers(x.ut, x.t, x.copies, pending, persistent, &lost);
    if (!lost.empty()) return LostError(x, lost, persistent);  // every rank alike
    std::vector<std::pair<int, uint32_t>> newly_bad;
    Status s;
    std::vector<std::string> send(x.comm.size()), recv;  // buffers reused by every round
    for (const std::vector<size_t>& round : PackRounds(x.ut, transfers, o.round_bytes)) {
      Reserve(x, transfers, round, &send);
      for (size_t i : round) {
        if (transfers[i].server != me || !s.ok()) continue;
        s = Guarded("local load: serving " + UnitName(x.m, x.ut.units[transfers[i].unit]), [&] {
          return Serve(x, transfers[i], node_files, pers_files, &send, &newly_bad);
        });
      }
      Seal(x, &send);
      // Received units are checked and placed while the round's messages
      // are readable (`arrived` points into them and into x.self).
      SP_RETURN_IF_ERROR(ExchangeRound(x.comm, send, &recv, [&](const auto& in) {
        if (s.ok())
          s = Guarded("local load: receiving", [&] { return Receive(x, in, &newly_bad); });
        if (s.ok())
          s = Guarded("local load: placing", [&] { return x.placer->FromMemory(x.arrived); });
      }));
    }
    std::vector<uint32_t> own_bad;
    if (pass == 0) {
      const OwnOutcome& mine = own.Join();
      if (s.ok()) s = mine.status;
      own_bad = mine.bad;
      x.result.bytes_local += mine.bytes_local;
    }
    std::vector<std::string> all;
    SP_RETURN_IF_ERROR(internal_comm::AllGatherAgreed(
        x.comm, s, s.ok() ? EncodeBad(newly_bad, own_bad) : std::string(), &all));
    std::set<std::pair<int, uint32_t>> found;  // in the rounds
    std::map<uint32_t, std::set<int>> again;   // unit -> ranks to send it to
    for (size_t r = 0; r < all.size(); ++r) {
      std::vector<std::pair<int, uint32_t>> failed;
      std::vector<uint32_t> theirs;
      SP_RETURN_IF_ERROR(
          DecodeBad(all[r], static_cast<int>(r), x.ut.units.size(), &failed, &theirs));
      found.insert(failed.begin(), failed.end());
      const int node = x.t.node_of(static_cast<int>(r));
      for (uint32_t u : theirs) {
        x.copies.bad.emplace(node, u);
        again[u].insert(static_cast<int>(r));
      }
    }
    x.copies.bad.insert(found.begin(), found.end());
    for (const Transfer& tr : transfers) {
      if (found.count({tr.source, tr.unit}))
        again[tr.unit].insert(tr.receivers.begin(), tr.receivers.end());
    }
    pending.clear();
    for (const auto& [u, ranks] : again)
      pending.emplace_back(u, std::vector<int>(ranks.begin(), ranks.end()));
  }
  return OkStatus();
}

// Steps 1 and 2: the copies and the manifest.
Status FindCopies(Recovery& x, int64_t iteration) {
  SP_ASSIGN_OR_RETURN(std::vector<NodeCopy> copies, GatherCopies(x.comm, x.t, x.node, x.dir));
  int root = -1;
  for (size_t r = 0; r < x.t.node_of_rank.size() && root < 0; ++r) {
    if (copies[x.t.node_of(static_cast<int>(r))].committed) root = static_cast<int>(r);
  }
  if (root < 0) {
    return NotFoundError("local load: no node of this job holds a committed copy of iteration " +
                         std::to_string(iteration) + " ('" + x.dir + "' with its replica map)");
  }
  Status s;
  if (x.comm.rank() == root) {
    Result<std::string> read = Guarded("local load: reading the manifest",
                                       [&] { return ReadManifestBytes(x.node, x.dir); });
    s = read.status();
    if (read.ok()) x.manifest_bytes = std::move(*read);
  }
  SP_RETURN_IF_ERROR(internal_comm::BroadcastAgreed(x.comm, s, &x.manifest_bytes, root));
  // Every rank decodes the same bytes: the same outcome everywhere.
  SP_ASSIGN_OR_RETURN(x.m, DecodeManifest(x.manifest_bytes, JoinPath(x.dir, kManifestName)));
  x.ut = UnitsOf(x.m);
  x.overlay.units.resize(x.m.files.size());  // kept units, per file
  x.copies.node_holds.assign(x.t.nodes.size(), std::vector<char>(x.m.files.size(), 0));
  for (size_t n = 0; n < copies.size(); ++n) {
    if (!copies[n].committed) continue;
    for (size_t f = 0; f < x.m.files.size(); ++f) {
      const std::vector<std::string>& held = copies[n].held;
      x.copies.node_holds[n][f] = std::find(held.begin(), held.end(), x.m.files[f]) != held.end();
    }
  }
  return OkStatus();
}

// Step 3's exchange: every rank's needs. Before it, this rank's reads of
// its node's copy start (*own): their bad units are known only when they
// end, and travel in pass 0's agreement (RunPasses).
Status GatherNeeds(Recovery& x, const internal_plan::LoadPlan& plan, const State& state,
                   internal_checkpoint::DataFiles* own_files, std::unique_ptr<OwnReads>* own) {
  std::vector<uint32_t> needs;
  Status s = Guarded("local load: listing the units needed", [&] {
    needs = NeededUnits(x.m, x.ut, plan, state);
    const int node = x.t.node_of(x.comm.rank());
    std::vector<uint32_t> tensor_units, object_units;
    for (uint32_t u : needs) {
      if (!x.copies.node_holds[node][x.ut.units[u].file]) continue;
      (x.placer->IsTensor(u) ? tensor_units : object_units).push_back(u);
    }
    *own = std::make_unique<OwnReads>([&x, own_files, tensor_units = std::move(tensor_units),
                                       object_units = std::move(object_units)] {
      return ReadOwn(x, own_files, tensor_units, object_units);
    });
    return OkStatus();
  });
  std::vector<std::string> all;
  SP_RETURN_IF_ERROR(
      internal_comm::AllGatherAgreed(x.comm, s, s.ok() ? EncodeUnits(needs, {}) : "", &all));
  x.needs.resize(all.size());
  for (size_t r = 0; r < all.size(); ++r) {
    std::vector<uint32_t> none;
    SP_RETURN_IF_ERROR(
        DecodeUnits(all[r], static_cast<int>(r), x.ut.units.size(), &x.needs[r], &none));
  }
  return OkStatus();
}

// The pipeline with steps 3 and 4 in place of its reads of the tensors; it
// reads the objects through the overlay.
Result<LoadResult> LoadOverlay(Recovery& x, State& state, const LocalTierOptions& tier,
                               const LoadOptions& load) {
  const int node = x.t.node_of(x.comm.rank());
  x.overlay.dir = x.dir;
  x.overlay.names = x.m.files;
  x.overlay.held = x.copies.node_holds[node];
  x.overlay.extent = x.ut.extent;
  OverlayStorage files(x.node, &x.overlay);
  LoadOptions o = load;
  o.storage = &files;
  o.cooperative = false;
  o.read_gap_bytes = 0;
  o.verify_checksums = true;
  o.log = nullptr;
  internal_io::CallResources res(o);
  internal_source::Source src;
  src.dir = x.dir;
  src.kind = "checkpoint";
  src.name = "local checkpoint '" + x.dir + "'";
  src.index = x.m;
  auto exchange = [&](const internal_plan::LoadPlan& plan, internal_checkpoint::DataFiles* files,
                      ThreadPool* pool, const internal_checkpoint::ReadOptions& read,
                      internal_checkpoint::ReadStats* stats) -> Status {
    Placer placer(x.m, x.ut, plan, x.node, x.dir, pool, read, stats);
    x.placer = &placer;
    // The own node's copy is read straight from the node, not through
    // `files`: the overlay under it changes as object units arrive.
    internal_checkpoint::DataFiles own_files(x.node, x.dir, &x.m);
    std::unique_ptr<OwnReads> own;  // joined before what it uses goes
    SP_RETURN_IF_ERROR(GatherNeeds(x, plan, state, &own_files, &own));
    return RunPasses(x, tier, *own);
  };
  SP_ASSIGN_OR_RETURN(LoadResult r,
                      internal_checkpoint::LoadFromSource(state, OkStatus(), src, x.comm, o, res,
                                                          "local load", exchange));
  r.bytes_local = x.result.bytes_local;
  r.bytes_peer = x.result.bytes_peer;
  r.bytes_persistent = x.result.bytes_persistent;
  r.bytes_received = x.result.bytes_received;
  return r;
}

Result<LoadResult> LocalLoadCollective(State& state, int64_t iteration, Comm& comm,
                                       const LocalTierOptions& o, const std::string& pdir,
                                       const LoadOptions& load, Storage* persistent) {
  const auto start = std::chrono::steady_clock::now();
  SP_ASSIGN_OR_RETURN(Topology t, GatherTopology(comm, o.node_id));
  RootedStorage node(o.storage ? o.storage : DefaultStorage(), o.local_root);
  Recovery x{comm, t, &node, persistent, IterDir(iteration), pdir};
  SP_RETURN_IF_ERROR(FindCopies(x, iteration));
  SP_ASSIGN_OR_RETURN(LoadResult r, LoadOverlay(x, state, o, load));
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

// What a node's first rank reports for LatestLocal: per committed
// iteration, its copy.
Result<std::string> NodeReport(Storage* node) {
  ByteWriter w;
  SP_ASSIGN_OR_RETURN(std::vector<int64_t> its, CommittedIterations(node));
  w.U32(static_cast<uint32_t>(its.size()));
  for (int64_t it : its) {
    SP_ASSIGN_OR_RETURN(NodeCopy c, ReadNodeCopy(node, IterDir(it)));
    w.I64(it);
    w.Blob(EncodeCopy(c));
  }
  return std::move(w.str());
}

}  // namespace

Result<LoadResult> LocalLoad(State& state, int64_t iteration, Comm& comm,
                             const LocalTierOptions& options, const std::string& persistent_dir,
                             const LoadOptions& load) {
  internal_io::CallResources res(load);
  Result<LoadResult> r = Guarded("local load", [&] {
    return LocalLoadCollective(state, iteration, comm, options, persistent_dir, load,
                               res.storage());
  });
  internal_checkpoint::LogLoadOutcome(res, comm, "local checkpoint " + IterDir(iteration), r);
  return r;
}

Result<std::optional<int64_t>> LatestLocal(Comm& comm, const LocalTierOptions& options) {
  return Guarded("local tier: finding the latest", [&]() -> Result<std::optional<int64_t>> {
    SP_ASSIGN_OR_RETURN(Topology t, GatherTopology(comm, options.node_id));
    RootedStorage node(options.storage ? options.storage : DefaultStorage(), options.local_root);
    Result<std::string> mine = std::string();
    if (t.local_index(comm.rank()) == 0)
      mine = Guarded("local tier: listing this node", [&] { return NodeReport(&node); });
    std::vector<std::string> all;
    SP_RETURN_IF_ERROR(internal_comm::AllGatherAgreed(comm, mine.status(),
                                                      mine.ok() ? *mine : std::string(), &all));
    // iteration -> (every file, the files some node holds)
    std::map<int64_t, std::pair<std::set<std::string>, std::set<std::string>>> seen;
    for (const std::vector<int>& ranks : t.ranks_of) {
      const int leader = ranks[0];
      ByteReader r(all[leader], "local tier report from rank " + std::to_string(leader));
      uint32_t n = 0;
      SP_RETURN_IF_ERROR(r.U32(&n));
      for (uint32_t i = 0; i < n; ++i) {
        int64_t it = 0;
        std::string blob;
        SP_RETURN_IF_ERROR(r.I64(&it));
        SP_RETURN_IF_ERROR(r.Blob(&blob));
        SP_ASSIGN_OR_RETURN(NodeCopy c, DecodeCopy(blob, leader));
        if (!c.committed) continue;
        seen[it].first.insert(c.all.begin(), c.all.end());
        seen[it].second.insert(c.held.begin(), c.held.end());
      }
    }
    for (auto it = seen.rbegin(); it != seen.rend(); ++it) {
      if (it->second.first == it->second.second) return std::optional<int64_t>(it->first);
    }
    return std::optional<int64_t>();
  });
}

}  // namespace shardpoint
