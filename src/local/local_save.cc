// LocalSave and LocalSaveAsync (local_tier.h): prepare every node, save,
// replicate.
//
//   0. every rank learns the topology (all-gather of node ids, carrying
//      the check of the arguments); the first rank of each node removes
//      that node's earlier copy of the iteration (its replica map first, so
//      it never looks committed with mixed data) and creates the
//      directory; with a retention policy (the TieredManager's), it moves
//      the data files of the checkpoint retention removes next into the
//      directory's spares, written over by steps 1 and 2 (recycle.h);
//                                                            (all-gather, agree)
//   1. Save into "/iter_<N>" through each rank's RootedStorage
//      (node_storage.h): every node's ranks write their data files into
//      their own node's root; rank 0 commits the manifest on its node;
//      buffered writes from the caller's memory, nothing fsynced;
//   2. Replicate (replicate.h): the manifest to every node, the data files
//      to the replica nodes, then each node's replica map (its commit);
//      spares not taken are removed.
// Async: step 0 runs in the call, steps 1 and 2 in the AsyncSaver's
// background thread (2 as the save's after_commit).
#include "src/local/local_save.h"

#include <chrono>
#include <memory>
#include <optional>

#include "shardpoint/local_tier.h"
#include "src/base/guard.h"
#include "src/format/manifest.h"
#include "src/io/path.h"
#include "src/io/resources.h"
#include "src/local/inventory.h"
#include "src/local/node_storage.h"
#include "src/local/replica_map.h"
#include "src/local/replicate.h"
#include "src/local/topology.h"
#include "src/source/remove_checkpoint.h"

using shardpoint::internal_base::Guarded;
using shardpoint::internal_format::kDataDir;
using shardpoint::internal_io::JoinPath;
using shardpoint::internal_local::GatherTopology;
using shardpoint::internal_local::IterDir;
using shardpoint::internal_local::kReplicaMapName;
using shardpoint::internal_local::kSpareDirName;
using shardpoint::internal_local::RecyclePolicy;
using shardpoint::internal_local::Replicate;
using shardpoint::internal_local::RootedStorage;
using shardpoint::internal_local::Topology;
using shardpoint::internal_source::RemoveCheckpoint;

namespace shardpoint {
namespace {

// Step 0 on the first rank of a node.
Status ClearNode(Storage* node, const std::string& dir, int64_t iteration,
                 const RecyclePolicy* recycle) {
  Status removed = node->RemoveFile(JoinPath(dir, kReplicaMapName));
  if (!removed.ok() && removed.code() != StatusCode::kNotFound) return removed;
  SP_RETURN_IF_ERROR(RemoveCheckpoint(node, dir));
  SP_RETURN_IF_ERROR(node->CreateDirs(JoinPath(dir, kDataDir)));
  if (recycle == nullptr) return OkStatus();
  SP_ASSIGN_OR_RETURN(std::optional<int64_t> victim,
                      internal_local::PickRecyclable(node, iteration, *recycle));
  if (!victim) return OkStatus();
  return internal_local::MoveToSpare(node, *victim, dir);
}

// What a local save needs, shared with its background thread.
struct LocalJob {
  Topology topology;
  std::unique_ptr<RootedStorage> node;
  std::string dir;  // "/iter_..."
  SaveOptions save;
  bool first = false;  // the node's first rank

  // After step 2 on the node's first rank: the spares no file took.
  Status DropSpares() { return first ? node->RemoveAll(JoinPath(dir, kSpareDirName)) : OkStatus(); }
};

// Step 0 (collective). REQUIRES: iteration >= 0.
Result<std::shared_ptr<LocalJob>> Prepare(int64_t iteration, Comm& comm, const LocalTierOptions& o,
                                          const RecyclePolicy* recycle) {
  auto job = std::make_shared<LocalJob>();
  Status s =
      iteration >= 0
          ? OkStatus()
          : InvalidArgumentError("local save: negative iteration " + std::to_string(iteration));
  // The check travels with the topology (one collective fewer in the stall).
  SP_ASSIGN_OR_RETURN(job->topology, GatherTopology(comm, o.node_id, s));
  job->node =
      std::make_unique<RootedStorage>(o.storage ? o.storage : DefaultStorage(), o.local_root);
  job->dir = IterDir(iteration);
  job->first = job->topology.local_index(comm.rank()) == 0;
  if (job->first) {
    s = Guarded("local save: preparing '" + job->node->Map(job->dir) + "'",
                [&] { return ClearNode(job->node.get(), job->dir, iteration, recycle); });
  }
  if (recycle != nullptr) {
    job->node->TakeSpares(JoinPath(job->dir, kSpareDirName), JoinPath(job->dir, kDataDir));
  }
  SP_RETURN_IF_ERROR(AgreeOnStatus(comm, s));
  SaveOptions& so = job->save;
  static_cast<Resources&>(so) = o;
  so.storage = job->node.get();
  so.staging_bytes = o.staging_bytes;
  so.direct_io = false;    // memory: the page cache is the destination
  so.preallocate = false;  // tmpfs would zero every page first
  so.overwrite = false;    // step 0 removed any earlier copy
  return job;
}

Result<LocalSaveStats> SaveJob(const State& state, Comm& comm, const LocalTierOptions& options,
                               LocalJob& job) {
  LocalSaveStats stats;
  SP_ASSIGN_OR_RETURN(stats.save, Save(state, job.dir, comm, job.save));
  SP_RETURN_IF_ERROR(Replicate(comm, job.topology, job.node.get(), job.dir, options, &stats));
  SP_RETURN_IF_ERROR(job.DropSpares());
  return stats;
}

}  // namespace

namespace internal_local {

Result<LocalSaveStats> LocalSaveWith(const State& state, int64_t iteration, Comm& comm,
                                     const LocalTierOptions& options,
                                     const RecyclePolicy* recycle) {
  return Guarded("local save", [&]() -> Result<LocalSaveStats> {
    SP_ASSIGN_OR_RETURN(std::shared_ptr<LocalJob> job, Prepare(iteration, comm, options, recycle));
    return SaveJob(state, comm, options, *job);
  });
}

Result<SaveHandle> LocalSaveAsyncWith(AsyncSaver& saver, const State& state, int64_t iteration,
                                      Comm& comm, const LocalTierOptions& options,
                                      const RecyclePolicy* recycle) {
  SP_ASSIGN_OR_RETURN(std::shared_ptr<LocalJob> job, Guarded("local save", [&] {
                        return Prepare(iteration, comm, options, recycle);
                      }));
  LocalTierOptions copy = options;
  return saver.Save(state, job->dir, comm, job->save, [job, copy, &comm](const SaveStats&) {
    LocalSaveStats stats;
    SP_RETURN_IF_ERROR(Replicate(comm, job->topology, job->node.get(), job->dir, copy, &stats));
    return job->DropSpares();
  });
}

}  // namespace internal_local

std::string LocalPath(const LocalTierOptions& options, int64_t iteration) {
  return options.local_root + IterDir(iteration);
}

Result<LocalSaveStats> LocalSave(const State& state, int64_t iteration, Comm& comm,
                                 const LocalTierOptions& options) {
  return internal_local::LocalSaveWith(state, iteration, comm, options, nullptr);
}

Result<SaveHandle> LocalSaveAsync(AsyncSaver& saver, const State& state, int64_t iteration,
                                  Comm& comm, const LocalTierOptions& options) {
  return internal_local::LocalSaveAsyncWith(saver, state, iteration, comm, options, nullptr);
}

}  // namespace shardpoint
