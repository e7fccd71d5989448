// Save: the collective that writes every rank's state and commits it.
//
// Four collectives, each carrying every sender's status with its payload
// (src/comm/agreed.h), so that a failure on any rank stops all ranks at the
// same point (no hang, no manifest):
//   1. rank 0 prepares the directory;    (broadcast: its status or the write dir)
//   2. every rank reduces its tensors to regions; each key's regions go to
//      the key's owner, which checks them and tells each holder its chunk
//      numbers and which replica writes (plan_exchange.h: a cache check,
//      then two all-to-alls, each carrying a failed rank's status);
//   3. every rank lays out and writes and fsyncs its data file; a rank whose
//      plan failed (every rank gets an owner's plan error) writes nothing and
//      carries the error on;
//   4. the commit (owner_commit.h): the places and checksums of the chunks
//      each rank wrote go to the keys' owners (with verify_replicas, the
//      replicas' checksums too: replica_owners.h), one all-to-all; each
//      owner assembles its keys' records, compares the replicas, and writes
//      large records as its own manifest shards; statuses, each owner's
//      replica finding and its part (small records, or its shards' index)
//      and the objects are gathered to rank 0, which writes the manifest
//      (commit.cc) if every rank was OK and no owner found a replica that
//      differs; (gather, then broadcast the outcome with the save's totals)
// When the agreed outcome is failure, rank 0 removes what the save wrote
// (RemoveFailedSave), so that a failed save does not keep the space it took.
// With a SavePlanCache, step 2 is skipped, and step 4 sends no structures
// (every rank keeps the records it assembled), when every rank's
// contribution hashes to its cached plan's key (the ranks agree on that
// first, so they hit or miss together). Rank 0 reports the
// outcome through SaveOptions::log only after step 4 (the commit).
#include <chrono>
#include <cstdio>
#include <future>
#include <memory>

#include "shardpoint/checkpoint.h"
#include "src/base/bytes.h"
#include "src/base/guard.h"
#include "src/checkpoint/commit.h"
#include "src/checkpoint/held_save.h"
#include "src/checkpoint/owner_commit.h"
#include "src/checkpoint/plan_exchange.h"
#include "src/checkpoint/replica_check.h"
#include "src/checkpoint/replica_owners.h"
#include "src/checkpoint/writer.h"
#include "src/comm/agreed.h"
#include "src/io/abandoned_writes.h"
#include "src/io/path.h"
#include "src/io/resources.h"
#include "src/plan/dist_plan.h"
#include "src/plan/save_plan.h"
#include "src/source/manifest_read.h"
#include "src/source/remove_checkpoint.h"

using shardpoint::internal_base::ByteReader;
using shardpoint::internal_base::ByteWriter;
using shardpoint::internal_base::Guarded;
using shardpoint::internal_checkpoint::AssembleManifest;
using shardpoint::internal_checkpoint::CommitManifestBytes;
using shardpoint::internal_checkpoint::CommitMessageOf;
using shardpoint::internal_checkpoint::CommitTotals;
using shardpoint::internal_checkpoint::EncodeReplicaSums;
using shardpoint::internal_checkpoint::OwnerInbox;
using shardpoint::internal_checkpoint::PlannedSave;
using shardpoint::internal_checkpoint::PlanSaveCollective;
using shardpoint::internal_checkpoint::PlanTraffic;
using shardpoint::internal_checkpoint::PrepareDirectory;
using shardpoint::internal_checkpoint::RemoveFailedSave;
using shardpoint::internal_checkpoint::ReplicaChecksums;
using shardpoint::internal_checkpoint::SendToOwners;
using shardpoint::internal_checkpoint::WriteDataFile;
using shardpoint::internal_checkpoint::WriterOptions;
using shardpoint::internal_checkpoint::Written;
using shardpoint::internal_comm::BroadcastAgreed;
using shardpoint::internal_comm::GatherAgreed;
using shardpoint::internal_format::CheckMetadataJson;
using shardpoint::internal_format::kDefaultBlockSize;
using shardpoint::internal_geometry::ContiguousView;
using shardpoint::internal_geometry::View;
using shardpoint::internal_io::CallResources;
using shardpoint::internal_io::JoinPath;
using shardpoint::internal_plan::BuildRegions;
using shardpoint::internal_plan::Contribution;
using shardpoint::internal_plan::LocalPlan;
using shardpoint::internal_plan::ObjectDesc;
using shardpoint::internal_plan::RankFile;
using shardpoint::internal_plan::Region;
using shardpoint::internal_plan::WriteItem;
using shardpoint::internal_source::HasManifest;
using shardpoint::internal_source::RemoveCheckpoint;

namespace shardpoint {
namespace internal_checkpoint {
namespace {

std::vector<View> Sources(const RankFile& rf, const std::vector<Region>& regions,
                          const State& state) {
  std::vector<View> out;
  out.reserve(rf.items.size());
  for (const WriteItem& item : rf.items) {
    if (item.is_object) {
      const std::string& b = state.objects[item.source].bytes;
      out.push_back(
          ContiguousView(const_cast<char*>(b.data()), 1, {static_cast<int64_t>(b.size())}));
    } else {
      out.push_back(regions[item.source].view);
    }
  }
  return out;
}

}  // namespace

Result<Contribution> MakeContribution(const State& state, const std::vector<Region>& regions) {
  Contribution c;
  c.regions.reserve(regions.size());
  for (const Region& r : regions) c.regions.push_back(r.desc);
  for (const Object& o : state.objects) {
    if (o.key.empty()) return InvalidArgumentError("an object has an empty key");
    if (o.index.size() != o.grid.size()) {
      return InvalidArgumentError("object '" + o.key + "': index " + ShapeToString(o.index) +
                                  " does not match grid " + ShapeToString(o.grid));
    }
    for (size_t d = 0; d < o.index.size(); ++d) {
      if (o.index[d] < 0 || o.index[d] >= o.grid[d]) {
        return InvalidArgumentError("object '" + o.key + "': index " + ShapeToString(o.index) +
                                    " lies outside grid " + ShapeToString(o.grid));
      }
    }
    c.objects.push_back(ObjectDesc{o.key, o.index, o.grid, o.bytes.size()});
  }
  return c;
}

}  // namespace internal_checkpoint

using internal_checkpoint::MakeContribution;
using internal_checkpoint::Sources;

namespace {

std::string FormatSeconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f s", s);
  return buf;
}

std::string SaveSummary(const std::string& dir, const SaveStats& st) {
  char buf[256];
  const double gb = static_cast<double>(st.bytes_written) / 1e9;
  std::snprintf(
      buf, sizeof buf, "%.3f GB in %d files, %lld chunks, in %.3f s (%.2f GB/s; plan %.3f s%s)", gb,
      st.num_files, static_cast<long long>(st.num_chunks), st.seconds,
      st.seconds > 0 ? gb / st.seconds : 0.0, st.plan_seconds, st.plan_cached ? ", cached" : "");
  std::string line = "shardpoint: saved checkpoint '" + dir + "' (committed): " + buf;
  if (!st.cleanup_error.empty()) line += "; but " + st.cleanup_error;
  return line;
}

// Step 1: rank 0 prepares the directory and every rank learns where to write.
// `write_dir_out` receives it as soon as rank 0 has it (so that a failed
// broadcast still lets rank 0 remove it), then on every rank.
Status AgreeOnWriteDir(const std::string& dir, Comm& comm, const SaveOptions& options,
                       Storage* storage, std::string* write_dir_out) {
  std::string write_dir;
  Status s;
  if (comm.rank() == 0) {
    Result<std::string> w = Guarded("preparing '" + dir + "'", [&] {
      return PrepareDirectory(storage, dir, options.overwrite);
    });
    s = w.status();
    if (w.ok()) write_dir = *w;
    *write_dir_out = write_dir;  // removed again if even the broadcast fails
  }
  SP_RETURN_IF_ERROR(BroadcastAgreed(comm, s, &write_dir, 0));
  *write_dir_out = write_dir;
  return OkStatus();
}

// Step 2, this rank's part: its regions (into `regions`) and its contribution
// (rank 0's metadata is the one stored, so rank 0 checks it).
Result<Contribution> DescribeState(const State& state, int rank,
                                   Result<std::vector<Region>>* regions) {
  *regions = Guarded("save: describing the state", [&] { return BuildRegions(state.tensors); });
  if (!regions->ok()) return regions->status();
  Result<Contribution> mine =
      Guarded("save: describing the state", [&] { return MakeContribution(state, **regions); });
  if (mine.ok() && rank == 0) {
    Status md = CheckMetadataJson(state.metadata_json);
    if (!md.ok()) return md;
  }
  return mine;
}

// Step 3, this rank's data file (`sums` and `block_sums` per item written) and
// the checksums of the replicas it holds but does not write (`replica_sums`).
Status WriteRankFile(const LocalPlan& plan, int rank, const std::string& write_dir,
                     const std::vector<Region>& regions, const State& state,
                     const SaveOptions& options, CallResources& res, std::vector<uint64_t>* sums,
                     std::vector<std::vector<uint64_t>>* block_sums,
                     std::vector<uint64_t>* replica_sums) {
  return Guarded("save: writing rank " + std::to_string(rank) + "'s data file", [&]() -> Status {
    const RankFile& rf = plan.file;
    ThreadPool* pool = res.pool();
    if (rf.file >= 0) {
      SP_ASSIGN_OR_RETURN(*sums,
                          WriteDataFile(res.storage(), JoinPath(write_dir, plan.path), rf,
                                        Sources(rf, regions, state), pool,
                                        WriterOptions{options.staging_bytes, 3, options.direct_io,
                                                      options.preallocate, kDefaultBlockSize},
                                        block_sums));
    }
    if (!rf.replicas.empty()) *replica_sums = ReplicaChecksums(rf, regions, state, pool);
    return OkStatus();
  });
}

// Step 3b, with verify_replicas (and more than one rank): what this rank
// tells each key's owner of its replicas (replica_owners.h).
Status ReplicaSumsFor(const Contribution& mine, const LocalPlan& lp,
                      const std::vector<uint64_t>& replica_sums, int n, Written* written) {
  return Guarded("save: checking replicas", [&]() -> Status {
    written->replica_sums = EncodeReplicaSums(mine, lp, written->sums, replica_sums, n);
    return OkStatus();
  });
}

using Totals = CommitTotals;

// Rank 0's outcome (the agreed error or the commit's, unchanged) and, when
// OK, the totals reach every rank.
Status BroadcastOutcome(Comm& comm, const Status& outcome, Totals* totals) {
  std::string msg;
  if (comm.rank() == 0) {
    ByteWriter w;
    w.U8(static_cast<uint8_t>(outcome.code()));
    if (outcome.ok()) {
      w.U64(totals->bytes), w.U64(totals->files), w.U64(totals->chunks);
    } else {
      w.Str(outcome.message());
    }
    msg = std::move(w.str());
  }
  SP_RETURN_IF_ERROR(comm.Broadcast(&msg, 0));
  if (comm.rank() == 0) return outcome;
  ByteReader in(msg, "save: the outcome from rank 0");
  uint8_t code;
  SP_RETURN_IF_ERROR(in.U8(&code));
  if (code != 0) {
    std::string text;
    SP_RETURN_IF_ERROR(in.Str(&text));
    if (code > static_cast<uint8_t>(StatusCode::kDeadlineExceeded)) return InternalError(text);
    return Status(static_cast<StatusCode>(code), std::move(text));
  }
  SP_RETURN_IF_ERROR(in.U64(&totals->bytes));
  SP_RETURN_IF_ERROR(in.U64(&totals->files));
  SP_RETURN_IF_ERROR(in.U64(&totals->chunks));
  return in.ExpectEnd();
}

// Committed and reported: removing the previous checkpoint (its manifest
// first, so it never looks complete) is cleanup, and its failure (a file of
// it held open on NFS or FUSE) leaves the new checkpoint committed. Returns
// what SaveStats::cleanup_error says: empty, or why and where it is left.
std::string RemovePrevious(Storage* storage, const std::string& previous, const std::string& dir) {
  Status removed = Guarded("save: removing the previous checkpoint",
                           [&] { return RemoveCheckpoint(storage, previous); });
  if (removed.ok()) return "";
  // Its manifest goes first; say whether that much happened.
  Result<bool> manifest = HasManifest(storage, previous);
  const bool gone = manifest.ok() && !*manifest;
  return "removing the previous checkpoint, moved to '" + previous + "'" +
         (gone ? " (no manifest: not a checkpoint)" : "") + ", failed; the next overwrite of '" +
         dir + "' removes it or moves it aside: " + removed.ToString();
}

// The four steps of the file comment, each agreed by every rank.
// `write_dir_out` receives the directory the ranks write into, once known.
Result<SaveStats> SaveCollective(const State& state, const std::string& dir, Comm& comm,
                                 const SaveOptions& options, CallResources& res,
                                 std::string* write_dir_out) {
  const auto start = std::chrono::steady_clock::now();
  Storage* storage = res.storage();
  const int rank = comm.rank();

  // An object store checks the directory while the ranks upload (held_save.h).
  internal_checkpoint::HeldSave held(storage, dir, options.overwrite, rank);
  if (held.active()) {
    held.Start();
  } else {
    SP_RETURN_IF_ERROR(AgreeOnWriteDir(dir, comm, options, storage, write_dir_out));
  }
  const std::string write_dir = held.active() ? dir : *write_dir_out;

  // 2. The plan: this rank's part, or the plan error every rank shares (a
  // rank-local failure, such as running out of memory, is agreed in step 4).
  Result<std::vector<Region>> regions = std::vector<Region>();
  Result<Contribution> mine = DescribeState(state, rank, &regions);
  const auto plan_start = std::chrono::steady_clock::now();
  PlannedSave planned;
  PlanTraffic traffic;
  Status s;
  SP_RETURN_IF_ERROR(PlanSaveCollective(comm, mine, options.plan_cache, options.verify_replicas,
                                        &planned, &s, &traffic));
  const double plan_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - plan_start).count();

  // 3. A rank whose plan failed writes nothing and carries the error on.
  Written written;
  std::vector<uint64_t> replica_sums;
  if (s.ok()) {
    s = WriteRankFile(*planned.local, rank, write_dir, *regions, state, options, res, &written.sums,
                      &written.blocks, &replica_sums);
  }
  if (s.ok() && options.verify_replicas && comm.size() > 1) {
    s = ReplicaSumsFor(*mine, *planned.local, replica_sums, comm.size(), &written);
  }

  // 4a. The chunks' places and checksums (and the replicas') to the keys'
  // owners; 4b. each owner assembles its keys' records and writes them as
  // shards, or sends them on (owner_commit.h).
  OwnerInbox inbox;
  uint64_t sent = 0, received = 0;
  SP_RETURN_IF_ERROR(SendToOwners(comm, s.ok() ? planned.local.get() : nullptr, planned.cached,
                                  written, &inbox, &sent, &received));
  std::string message;
  if (s.ok()) {
    Result<std::string> m = Guarded("save: committing its keys' records", [&] {
      return CommitMessageOf(inbox, *planned.local, planned.cached, options.plan_cache, written,
                             comm, storage, write_dir);
    });
    if (m.ok()) {
      message = std::move(*m);
    } else {
      s = m.status();
    }
  }
  written = Written();

  // 4c. Rank 0 assembles the manifest, takes the owners' first replica
  // mismatch, if any, and commits.
  std::vector<std::string> all;
  Status gathered = GatherAgreed(comm, s, message, 0, &all);
  message.clear();
  if (held.active() && (rank == 0 || gathered.ok())) {
    SP_RETURN_IF_ERROR(held.Settle(comm, &gathered, write_dir_out));
  }
  std::string previous;  // an overwrite's previous checkpoint, removed after the commit
  std::string open;      // rank 0, an object store: aborting a crashed save's uploads failed
  Totals totals;
  if (rank == 0 && gathered.ok()) {
    Status committed = Guarded("save: committing '" + dir + "'", [&]() -> Status {
      SP_ASSIGN_OR_RETURN(std::string top, AssembleManifest(all, planned.cached, options.plan_cache,
                                                            state, storage, write_dir, &totals));
      all.clear();
      // An object store: every file of this save is complete now (the ranks
      // agreed on their completes, and the manifest's shards are written),
      // so an upload still open under `dir` is a crashed earlier save's
      // (its parts kept and billed, invisible to listings). The listing
      // that finds them goes beside the commit's PUT, not after it: no
      // round trip more. It can abort only uploads that would never be part
      // of a checkpoint (a racing writer's: its save fails, as it would at
      // its own commit).
      std::future<std::string> aborting;
      if (internal_io::FindAbandonedWrites(storage) != nullptr) {
        aborting = std::async(std::launch::async, [storage, &dir] {
          return internal_io::AbortAbandonedWritesUnder(storage, dir);
        });
      }
      Status s = CommitManifestBytes(storage, dir, write_dir, top, &previous);
      if (aborting.valid()) open = aborting.get();
      return s;
    });
    // Named like every agreed error: "rank 0: ..."
    if (!committed.ok()) gathered = Status(committed.code(), "rank 0: " + committed.message());
  }
  // Rank 0 tells every rank the outcome: the agreed error or the commit's.
  if (rank != 0) SP_RETURN_IF_ERROR(gathered);  // the exchange itself failed
  SP_RETURN_IF_ERROR(BroadcastOutcome(comm, gathered, &totals));

  SaveStats stats;
  stats.bytes_written = totals.bytes;
  stats.num_files = static_cast<int>(totals.files);
  stats.num_chunks = static_cast<int64_t>(totals.chunks);
  for (const WriteItem& item : planned.local->file.items) stats.rank_bytes += item.nbytes;
  stats.plan_seconds = plan_seconds;
  stats.plan_cached = planned.cached;
  stats.plan_bytes_sent = traffic.sent;
  stats.plan_bytes_received = traffic.received;
  if (rank == 0 && !previous.empty()) stats.cleanup_error = RemovePrevious(storage, previous, dir);
  if (!open.empty()) stats.cleanup_error = open;
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return stats;
}

}  // namespace

Result<SaveStats> Save(const State& state, const std::string& dir, Comm& comm,
                       const SaveOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  std::string write_dir;
  CallResources res(options);
  // Every local step is Guarded; this catches what a collective call throws.
  Result<SaveStats> stats =
      Guarded("save", [&] { return SaveCollective(state, dir, comm, options, res, &write_dir); });
  // A failed save gives its space back (a full disk would otherwise stay
  // full and fail every later save). Every rank has left the save's steps
  // when it fails, so rank 0 alone removes every rank's files.
  std::string cleanup;
  if (!stats.ok() && comm.rank() == 0 && !write_dir.empty()) {
    Status removed =
        Guarded("cleanup", [&] { return RemoveFailedSave(res.storage(), dir, write_dir); });
    cleanup = removed.ok() ? "; its files were removed"
                           : "; removing its files failed too: " + removed.ToString();
  }
  // Every rank returns the same agreed outcome; rank 0 reports it, after the
  // commit (SaveCollective returns OK only once the manifest is durable).
  if (options.log && comm.rank() == 0) {
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    res.Log(stats.ok() ? SaveSummary(dir, *stats)
                       : "shardpoint: save of '" + dir + "' FAILED after " + FormatSeconds(secs) +
                             " (not committed; the previous checkpoint "
                             "is untouched): " +
                             stats.status().ToString() + cleanup);
  }
  return stats;
}

}  // namespace shardpoint
