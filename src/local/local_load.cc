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
//      on that node) and all-gathers its needs, and which files its node's
//      copy maps (file_map.h: to serve them in place);
//   4. every rank computes the same transfers (recover_plan.h) for the
//      units its node lacks, and runs them in rounds of one AllToAll while
//      its own reads go on (recovery_round.h): a server sends each unit from its node's copy
//      in place where the node storage maps it (file_map.h; the receiver
//      checks it), else reads it (or the persistent checkpoint's) into the
//      round's buffer and checks it there; a receiver checks it where it
//      arrives and places it from there into its tensors, in the round it
//      arrives: between thread ranks in the sender's memory itself
//      (ViewAllToAll's pieces, no copy by the Comm), else in the Comm's
//      receive buffer (send and receive buffers are reused by every round:
//      a pass's memory is one round's messages). A unit that fails on
//      either side marks that copy bad.
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
#include "src/io/file_map.h"
#include "src/io/path.h"
#include "src/local/inventory.h"
#include "src/local/node_storage.h"
#include "src/local/overlay.h"
#include "src/local/placement.h"
#include "src/local/recover_plan.h"
#include "src/local/recovery.h"
#include "src/local/recovery_round.h"
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
using shardpoint::internal_local::Arrive;
using shardpoint::internal_local::Arrived;
using shardpoint::internal_local::AssignServers;
using shardpoint::internal_local::CommittedIterations;
using shardpoint::internal_local::CopyState;
using shardpoint::internal_local::ExchangeRound;
using shardpoint::internal_local::FileCache;
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
using shardpoint::internal_local::ReadUnit;
using shardpoint::internal_local::Receive;
using shardpoint::internal_local::Recovery;
using shardpoint::internal_local::Reserve;
using shardpoint::internal_local::RootedStorage;
using shardpoint::internal_local::SentFromMapping;
using shardpoint::internal_local::Serve;
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

// a: units (< num_units); b: files (< num_files).
Status DecodeUnits(const std::string& bytes, int rank, size_t num_units, size_t num_files,
                   std::vector<uint32_t>* a, std::vector<uint32_t>* b) {
  ByteReader r(bytes, "local tier needs from rank " + std::to_string(rank));
  for (std::vector<uint32_t>* v : {a, b}) {
    const size_t bound = v == a ? num_units : num_files;
    uint64_t n = 0;
    SP_RETURN_IF_ERROR(r.Count(&n, 4));
    v->resize(n);
    SP_RETURN_IF_ERROR(r.Raw(v->data(), n * 4));
    for (uint32_t u : *v) {
      if (u >= bound)
        return DataLossError("local tier: rank " + std::to_string(rank) + " names " +
                             (v == a ? "unit " : "file ") + std::to_string(u) + " of " +
                             std::to_string(bound));
    }
  }
  return r.ExpectEnd();
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

// Step 3's own-node part: the units this rank needs that its node holds,
// read from the node's copy on a thread of their own (OwnReads) while the
// peer rounds of pass 0 run on the rank's thread. The tensor units are
// placed as they are read (once, every block verified); should that fail,
// unit by unit, to tell the bad ones. Object units are only checked (the
// pipeline reads them again). (Read, not mapped: here a read() straight
// into the tensors costs what a mapping's faults and copy do, and less
// once the kernel has aged the file's pages; docs/local-tier.md.)
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
    // Between thread ranks a unit its server maps is sent where it lies: it
    // holds no round memory, and all such go in one round (no round_bytes).
    const bool views = dynamic_cast<internal_comm::ViewAllToAll*>(&x.comm) != nullptr;
    auto unbuffered = [&](const Transfer& tr) { return views && SentFromMapping(x, tr); };
    for (const std::vector<size_t>& round :
         PackRounds(x.ut, transfers, o.round_bytes, unbuffered)) {
      Reserve(x, transfers, round);
      for (size_t i : round) {
        if (transfers[i].server != me || !s.ok()) continue;
        s = Guarded("local load: serving " + UnitName(x.m, x.ut.units[transfers[i].unit]),
                    [&] { return Serve(x, transfers[i], node_files, pers_files, &newly_bad); });
      }
      // Received units are checked and placed while the round's messages
      // are readable (`arrived` points into them, x.reads and the mappings).
      SP_RETURN_IF_ERROR(ExchangeRound(x, &send, &recv, [&](const auto& in) {
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

// The files this rank's node holds, mapped where its storage maps them; a
// file that does not map is read through ReadAt (which reports its error).
void MapNodeCopy(Recovery& x) {
  x.maps.resize(x.m.files.size());
  auto* mapper = dynamic_cast<internal_io::FileMapper*>(x.node);
  if (mapper == nullptr) return;
  const std::vector<char>& held = x.copies.node_holds[x.t.node_of(x.comm.rank())];
  for (size_t f = 0; f < x.m.files.size(); ++f) {
    if (!held[f]) continue;
    Result<std::unique_ptr<internal_io::MappedFile>> m =
        mapper->MapFile(JoinPath(x.dir, x.m.files[f]));
    if (m.ok()) x.maps[f] = std::move(*m);
  }
}

// Steps 1 and 2: the copies and the manifest; the node's copy mapped.
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
  MapNodeCopy(x);
  return OkStatus();
}

// Step 3's exchange: every rank's needs, and the files its node copy maps.
// Before it, this rank's reads of
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
  std::vector<uint32_t> mapped;
  for (size_t f = 0; f < x.maps.size(); ++f) {
    if (x.maps[f]) mapped.push_back(static_cast<uint32_t>(f));
  }
  std::vector<std::string> all;
  SP_RETURN_IF_ERROR(
      internal_comm::AllGatherAgreed(x.comm, s, s.ok() ? EncodeUnits(needs, mapped) : "", &all));
  x.needs.resize(all.size());
  x.maps_of.assign(all.size(), std::vector<char>(x.m.files.size(), 0));
  for (size_t r = 0; r < all.size(); ++r) {
    SP_RETURN_IF_ERROR(DecodeUnits(all[r], static_cast<int>(r), x.ut.units.size(), x.m.files.size(),
                                   &x.needs[r], &mapped));
    for (uint32_t f : mapped) x.maps_of[r][f] = 1;
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
