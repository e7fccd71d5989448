// Save: the collective that writes every rank's state and commits it.
//
// Four collectives, each carrying every sender's status with its payload
// (src/comm/agreed.h), so that a failure on any rank stops all ranks at the
// same point (no hang, no manifest):
//   1. rank 0 prepares the directory;    (broadcast: its status or the write dir)
//   2. every rank reduces its tensors to regions; contributions are
//      all-gathered in binary;          (all-gather: status or contribution)
//   3. every rank computes the same deterministic plan and writes and fsyncs
//      its data file; a rank whose plan failed writes nothing and carries the
//      error on;
//   4. statuses and checksums are gathered to rank 0, which commits
//      (commit.cc) if every rank was OK;  (gather, then broadcast the outcome)
// When the agreed outcome is failure, rank 0 removes what the save wrote
// (RemoveFailedSave), so that a failed save does not keep the space it took.
// With a SavePlanCache, step 3 skips decoding and planning when the
// gathered bytes hash to the cached plan's key; all ranks
// see the same bytes, so they hit or miss together. Rank 0 reports the
// outcome through SaveOptions::log only after step 4 (the commit).
#include <chrono>
#include <cstdio>
#include <memory>

#include "shardpoint/checkpoint.h"
#include "src/base/guard.h"
#include "src/checkpoint/checksum_message.h"
#include "src/checkpoint/commit.h"
#include "src/checkpoint/replica_check.h"
#include "src/checkpoint/writer.h"
#include "src/comm/agreed.h"
#include "src/io/resources.h"
#include "src/plan/plan_cache.h"
#include "src/plan/save_plan.h"

using shardpoint::internal_base::Guarded;
using shardpoint::internal_checkpoint::CommitCheckpoint;
using shardpoint::internal_checkpoint::CompareReplicas;
using shardpoint::internal_checkpoint::DecodeChecksums;
using shardpoint::internal_checkpoint::EncodeChecksums;
using shardpoint::internal_checkpoint::JoinPath;
using shardpoint::internal_checkpoint::PrepareDirectory;
using shardpoint::internal_checkpoint::RemoveCheckpoint;
using shardpoint::internal_checkpoint::RemoveFailedSave;
using shardpoint::internal_checkpoint::ReplicaChecksums;
using shardpoint::internal_checkpoint::WriteDataFile;
using shardpoint::internal_checkpoint::WriterOptions;
using shardpoint::internal_comm::AllGatherAgreed;
using shardpoint::internal_comm::BroadcastAgreed;
using shardpoint::internal_comm::BroadcastStatus;
using shardpoint::internal_comm::GatherAgreed;
using shardpoint::internal_format::CheckMetadataJson;
using shardpoint::internal_format::ChunkRecord;
using shardpoint::internal_format::kManifestName;
using shardpoint::internal_format::Manifest;
using shardpoint::internal_format::TensorRecord;
using shardpoint::internal_geometry::ContiguousView;
using shardpoint::internal_geometry::View;
using shardpoint::internal_io::CallResources;
using shardpoint::internal_plan::BuildRegions;
using shardpoint::internal_plan::Contribution;
using shardpoint::internal_plan::DecodeContribution;
using shardpoint::internal_plan::EncodeContribution;
using shardpoint::internal_plan::HashContributions;
using shardpoint::internal_plan::LookupPlan;
using shardpoint::internal_plan::ObjectDesc;
using shardpoint::internal_plan::PlanKey;
using shardpoint::internal_plan::PlanSave;
using shardpoint::internal_plan::RankFile;
using shardpoint::internal_plan::Region;
using shardpoint::internal_plan::SavePlan;
using shardpoint::internal_plan::StorePlan;
using shardpoint::internal_plan::WriteItem;

namespace shardpoint {
namespace internal_checkpoint {
namespace {

// Fills the checksums of rank r's items into the manifest.
void ApplyChecksums(const RankFile& rf, const std::vector<uint64_t>& sums,
                    std::vector<std::vector<uint64_t>>& blocks, Manifest* m) {
  for (size_t i = 0; i < rf.items.size(); ++i) {
    const WriteItem& item = rf.items[i];
    if (item.is_object) {
      m->objects[item.record].checksum = sums[i];
    } else {
      ChunkRecord& c = m->tensors[item.record].chunks[item.chunk];
      c.checksum = sums[i];
      if (i < blocks.size()) c.block_sums = std::move(blocks[i]);
    }
  }
}

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

using internal_checkpoint::ApplyChecksums;
using internal_checkpoint::MakeContribution;
using internal_checkpoint::Sources;

namespace {

// Decodes the gathered contributions and plans, or reuses the cached plan
// when the gathered bytes are unchanged. The plan is deterministic, so a rank
// whose cache is cold computes the same plan as ranks that hit.
Result<std::shared_ptr<const SavePlan>> PlanFromGathered(const std::vector<std::string>& all,
                                                         SavePlanCache* cache, bool list_replicas) {
  PlanKey key;
  if (cache) {
    key = HashContributions(all);
    key.lo ^= list_replicas;  // a plan without replica lists cannot verify them
    if (std::shared_ptr<const SavePlan> hit = LookupPlan(*cache, key)) return hit;
  }
  std::vector<Contribution> contributions(all.size());
  for (size_t r = 0; r < all.size(); ++r) {
    SP_ASSIGN_OR_RETURN(contributions[r], DecodeContribution(all[r], static_cast<int>(r)));
  }
  SP_ASSIGN_OR_RETURN(SavePlan plan, PlanSave(contributions, list_replicas));
  std::shared_ptr<const SavePlan> shared = std::make_shared<const SavePlan>(std::move(plan));
  if (cache) StorePlan(*cache, key, shared);
  return shared;
}

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

// Step 3, this rank's data file and the checksums of the replicas it holds
// but does not write (`sums`, then `block_sums` per item written).
Status WriteRankFile(const SavePlan& plan, int rank, const std::string& write_dir,
                     const std::vector<Region>& regions, const State& state,
                     const SaveOptions& options, CallResources& res, std::vector<uint64_t>* sums,
                     std::vector<std::vector<uint64_t>>* block_sums) {
  return Guarded("save: writing rank " + std::to_string(rank) + "'s data file", [&]() -> Status {
    const RankFile& rf = plan.ranks[rank];
    ThreadPool* pool = res.pool();
    if (rf.file >= 0) {
      SP_ASSIGN_OR_RETURN(
          *sums, WriteDataFile(res.storage(), JoinPath(write_dir, plan.manifest.files[rf.file]), rf,
                               Sources(rf, regions, state), pool,
                               WriterOptions{options.staging_bytes, 3, options.direct_io,
                                             options.preallocate, plan.manifest.block_size},
                               block_sums));
    }
    if (!rf.replicas.empty()) {
      std::vector<uint64_t> replica_sums = ReplicaChecksums(rf, regions, state, pool);
      sums->insert(sums->end(), replica_sums.begin(), replica_sums.end());
    }
    return OkStatus();
  });
}

// Step 4 on rank 0: this save's manifest (its own copy: the plan may be the
// cache's, shared by later saves) with every rank's checksums from
// `gathered`, the replicas compared, then the commit. `previous` receives an
// overwrite's previous checkpoint, removed after the outcome is agreed.
Status CommitOnRank0(const SavePlan& plan, const std::vector<std::string>& gathered,
                     const State& state, Storage* storage, const std::string& dir,
                     const std::string& write_dir, std::string* previous) {
  return Guarded("save: committing '" + dir + "'", [&]() -> Status {
    Manifest m = plan.manifest;
    std::vector<std::vector<uint64_t>> replica_sums(gathered.size());
    for (size_t r = 0; r < gathered.size(); ++r) {
      const RankFile& file = plan.ranks[r];
      std::vector<std::vector<uint64_t>> blocks;
      SP_ASSIGN_OR_RETURN(std::vector<uint64_t> got,
                          DecodeChecksums(gathered[r], file.items.size() + file.replicas.size(),
                                          static_cast<int>(r), &blocks));
      ApplyChecksums(file, got, blocks, &m);
      replica_sums[r].assign(got.begin() + file.items.size(), got.end());
    }
    SP_RETURN_IF_ERROR(CompareReplicas(m, plan.ranks, replica_sums));
    m.has_common = state.common.has_value();
    if (m.has_common) m.common = *state.common;
    m.metadata_json = state.metadata_json;
    return CommitCheckpoint(storage, dir, write_dir, m, previous);
  });
}

SaveStats StatsOf(const SavePlan& plan, int rank) {
  SaveStats stats;
  stats.bytes_written = plan.total_bytes;
  for (const WriteItem& item : plan.ranks[rank].items) stats.rank_bytes += item.nbytes;
  stats.num_files = static_cast<int>(plan.manifest.files.size());
  for (const TensorRecord& t : plan.manifest.tensors) stats.num_chunks += t.chunks.size();
  return stats;
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
  Result<bool> manifest = storage->Exists(JoinPath(previous, kManifestName));
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
  const int64_t hits_before = options.plan_cache ? options.plan_cache->hits() : 0;
  Storage* storage = res.storage();
  const int rank = comm.rank();

  SP_RETURN_IF_ERROR(AgreeOnWriteDir(dir, comm, options, storage, write_dir_out));
  const std::string write_dir = *write_dir_out;

  Result<std::vector<Region>> regions = std::vector<Region>();
  Result<Contribution> mine = DescribeState(state, rank, &regions);
  const auto plan_start = std::chrono::steady_clock::now();
  std::vector<std::string> all;
  SP_RETURN_IF_ERROR(AllGatherAgreed(comm, mine.status(),
                                     mine.ok() ? EncodeContribution(*mine) : std::string(), &all));

  // 3. The plan (the same on every rank: a failure is normally every rank's,
  // and a rank-local one, such as running out of memory, is agreed in step 4).
  Result<std::shared_ptr<const SavePlan>> plan = Guarded("save: planning", [&] {
    return PlanFromGathered(all, options.plan_cache, options.verify_replicas);
  });
  all.clear();
  const bool plan_cached = options.plan_cache && options.plan_cache->hits() > hits_before;
  const double plan_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - plan_start).count();
  // A rank whose plan failed writes nothing and carries the error on.
  std::vector<uint64_t> sums;
  std::vector<std::vector<uint64_t>> block_sums;
  Status s = plan.status();
  if (s.ok()) {
    s = WriteRankFile(**plan, rank, write_dir, *regions, state, options, res, &sums, &block_sums);
  }

  // 4. Commit (rank 0 first compares replicas, with verify_replicas).
  Status gathered = GatherAgreed(comm, s, s.ok() ? EncodeChecksums(sums, block_sums) : "", 0, &all);
  block_sums.clear();
  std::string previous;  // an overwrite's previous checkpoint, removed after the commit
  if (rank == 0 && gathered.ok()) {
    Status committed = CommitOnRank0(**plan, all, state, storage, dir, write_dir, &previous);
    // Named like every agreed error: "rank 0: ..."
    if (!committed.ok()) gathered = Status(committed.code(), "rank 0: " + committed.message());
  }
  // Rank 0 tells every rank the outcome: the agreed error or the commit's.
  if (rank != 0) SP_RETURN_IF_ERROR(gathered);  // the exchange itself failed
  SP_RETURN_IF_ERROR(BroadcastStatus(comm, gathered, 0));

  SaveStats stats = StatsOf(**plan, rank);
  stats.plan_seconds = plan_seconds;
  stats.plan_cached = plan_cached;
  if (rank == 0 && !previous.empty()) stats.cleanup_error = RemovePrevious(storage, previous, dir);
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
