// TieredManager (include/shardpoint/tiered_manager.h): the schedule, the
// drain's start and commit, local retention, and resume from either tier.
#include "shardpoint/tiered_manager.h"

#include <algorithm>

#include "src/base/guard.h"
#include "src/checkpoint/commit.h"
#include "src/comm/agreed.h"
#include "src/io/path.h"
#include "src/io/resources.h"
#include "src/local/drain.h"
#include "src/local/inventory.h"
#include "src/local/local_save.h"
#include "src/local/node_storage.h"
#include "src/local/replica_map.h"
#include "src/local/topology.h"
#include "src/source/manifest_read.h"
#include "src/source/remove_checkpoint.h"

namespace shardpoint {

using internal_base::Guarded;
using internal_io::JoinPath;
using internal_local::Drain;
using internal_local::IterDir;
using internal_local::RootedStorage;

namespace {

Status CheckOptions(const TieredOptions& o) {
  if (o.local_every < 0 || o.persistent_every < 0) {
    return InvalidArgumentError("TieredManager: negative local_every or persistent_every");
  }
  if (o.keep_local < 1) {
    return InvalidArgumentError("TieredManager: keep_local must be at least 1, not " +
                                std::to_string(o.keep_local));
  }
  return OkStatus();
}

RootedStorage NodeStorage(const LocalTierOptions& o) {
  return RootedStorage(o.storage ? o.storage : DefaultStorage(), o.local_root);
}

// A node's local checkpoint removed: its replica map first (it no longer
// counts), then the manifest, then the rest.
Status RemoveLocal(Storage* node, const std::string& dir) {
  Status s = node->RemoveFile(JoinPath(dir, internal_local::kReplicaMapName));
  if (!s.ok() && s.code() != StatusCode::kNotFound) return s;
  return internal_source::RemoveCheckpoint(node, dir);
}

// Local retention on a node's first rank.
Status RetainNode(Storage* node, int keep, const std::vector<int64_t>& busy) {
  SP_ASSIGN_OR_RETURN(std::vector<int64_t> committed, internal_local::CommittedIterations(node));
  if (committed.empty()) return OkStatus();
  SP_ASSIGN_OR_RETURN(std::vector<int64_t> all, internal_local::IterationDirs(node));
  const size_t first_kept =
      committed.size() > static_cast<size_t>(keep) ? committed.size() - keep : 0;
  const int64_t oldest_kept = committed[first_kept];
  for (int64_t it : all) {
    if (it >= oldest_kept || std::find(busy.begin(), busy.end(), it) != busy.end()) continue;
    SP_RETURN_IF_ERROR(RemoveLocal(node, IterDir(it)));
  }
  return OkStatus();
}

// Per manifest file, the nodes its replica map lists (empty: none).
Result<std::vector<std::vector<std::string>>> MapNodes(Storage* node, const std::string& dir,
                                                       const internal_format::Manifest& m) {
  const std::string path = JoinPath(dir, internal_local::kReplicaMapName);
  SP_ASSIGN_OR_RETURN(std::string text, node->ReadFileToString(path));
  SP_ASSIGN_OR_RETURN(internal_local::ReplicaMap map, internal_local::DecodeReplicaMap(text, path));
  std::vector<std::vector<std::string>> out(m.files.size());
  for (auto& [file, nodes] : map.files) {
    auto it = std::find(m.files.begin(), m.files.end(), file);
    if (it != m.files.end()) out[it - m.files.begin()] = std::move(nodes);
  }
  return out;
}

}  // namespace

TieredManager::TieredManager(const TieredOptions& options,
                             std::unique_ptr<CheckpointManager> persistent)
    : options_(options), persistent_(std::move(persistent)) {}

TieredManager::~TieredManager() = default;

std::optional<int64_t> TieredManager::draining() const {
  if (drain_) return drain_->iteration;
  return drain_after_;
}

Result<std::unique_ptr<TieredManager>> TieredManager::Open(const std::string& root, Comm& comm,
                                                           const TieredOptions& options) {
  SP_RETURN_IF_ERROR(AgreeOnStatus(comm, CheckOptions(options)));
  SP_ASSIGN_OR_RETURN(std::unique_ptr<CheckpointManager> p,
                      CheckpointManager::Open(root, comm, options.persistent));
  std::unique_ptr<TieredManager> m(new TieredManager(options, std::move(p)));
  SP_ASSIGN_OR_RETURN(internal_local::Topology t,
                      internal_local::GatherTopology(comm, options.local.node_id));
  m->topology_ = std::make_unique<internal_local::Topology>(std::move(t));
  return m;
}

Status TieredManager::RetainLocal(Comm& comm) {
  Status s;
  if (topology_->local_index(comm.rank()) == 0) {
    std::vector<int64_t> busy;
    if (std::optional<int64_t> d = draining()) busy.push_back(*d);
    RootedStorage node = NodeStorage(options_.local);
    s = Guarded("local retention on '" + options_.local.local_root + "'",
                [&] { return RetainNode(&node, options_.keep_local, busy); });
  }
  return AgreeOnStatus(comm, s);
}

Status TieredManager::Settle(Comm& comm) {
  if (!pending_.valid()) return OkStatus();
  SaveHandle h = std::move(pending_);
  pending_ = SaveHandle();
  // Every rank's Wait() returns the same (async_save.h).
  Status s = h.Wait().status();
  if (!s.ok()) {
    drain_after_.reset();
    return s;
  }
  SP_RETURN_IF_ERROR(RetainLocal(comm));  // keeps drain_after_
  if (!drain_after_) return OkStatus();
  const int64_t it = *drain_after_;
  drain_after_.reset();
  return StartDrain(it, comm);
}

Status TieredManager::StartDrain(int64_t iteration, Comm& comm) {
  SP_RETURN_IF_ERROR(FinishDrain(comm, true).status());
  auto d = std::make_unique<Drain>();
  d->iteration = iteration;
  d->dir = persistent_->PathFor(iteration);
  internal_io::CallResources res(options_.persistent);
  Storage* storage = res.storage();
  RootedStorage node = NodeStorage(options_.local);
  const std::string local_dir = IterDir(iteration);
  std::vector<uint32_t> files;
  Status s = Guarded("draining '" + node.Map(local_dir) + "'", [&]() -> Status {
    SP_ASSIGN_OR_RETURN(d->manifest, internal_source::ReadManifest(&node, local_dir));
    SP_ASSIGN_OR_RETURN(auto map_nodes, MapNodes(&node, local_dir, d->manifest));
    const int me = comm.rank();
    const auto& t = *topology_;
    files = internal_local::DrainFiles(map_nodes, t.nodes[t.node_of(me)], t.local_index(me),
                                       static_cast<int>(t.ranks_of[t.node_of(me)].size()));
    return OkStatus();
  });
  if (comm.rank() == 0 && s.ok()) {
    s = Guarded("preparing '" + d->dir + "'", [&]() -> Status {
      SP_ASSIGN_OR_RETURN(bool complete, internal_source::HasManifest(storage, d->dir));
      if (complete) return OkStatus();  // kept: write_dir stays empty, no drain
      SP_ASSIGN_OR_RETURN(d->write_dir,
                          internal_checkpoint::PrepareDirectory(storage, d->dir, false));
      return storage->CreateDirs(JoinPath(d->write_dir, internal_format::kDataDir));
    });
  }
  SP_RETURN_IF_ERROR(AgreeOnStatus(comm, s));
  SP_RETURN_IF_ERROR(comm.Broadcast(&d->write_dir, 0));
  if (d->write_dir.empty()) return OkStatus();  // that persistent checkpoint exists
  Drain* raw = d.get();
  const uint64_t rate = options_.drain_bytes_per_second;
  const LocalTierOptions lo = options_.local;
  d->thread = std::thread([raw, storage, lo, local_dir, files = std::move(files), rate] {
    RootedStorage n = NodeStorage(lo);
    internal_local::CopyFiles(&n, local_dir, storage, files, rate, raw);
    raw->done.store(true);
  });
  drain_ = std::move(d);
  return OkStatus();
}

Result<std::optional<int64_t>> TieredManager::FinishDrain(Comm& comm, bool wait) {
  if (!drain_) return std::optional<int64_t>();
  if (wait && drain_->thread.joinable()) drain_->thread.join();
  std::vector<std::string> all;
  SP_RETURN_IF_ERROR(comm.AllGather(drain_->done.load() ? "1" : "0", &all));
  if (std::count(all.begin(), all.end(), "1") != static_cast<long>(all.size())) {
    return std::optional<int64_t>();
  }
  std::unique_ptr<Drain> d = std::move(drain_);
  if (d->thread.joinable()) d->thread.join();
  internal_io::CallResources res(options_.persistent);
  Status s = AgreeOnStatus(comm, d->status);
  if (!s.ok()) {
    if (comm.rank() == 0) {
      internal_checkpoint::RemoveFailedSave(res.storage(), d->dir, d->write_dir).IgnoreError();
    }
    return Status(s.code(), "draining the local checkpoint of iteration " +
                                std::to_string(d->iteration) + " to '" + d->dir +
                                "' failed (the local checkpoints stay): " + s.message());
  }
  Status c;
  if (comm.rank() == 0) {
    c = Guarded("committing '" + d->dir + "'", [&]() -> Status {
      std::string previous;
      return internal_checkpoint::CommitCheckpoint(res.storage(), d->dir, d->write_dir, d->manifest,
                                                   &previous);
    });
  }
  SP_RETURN_IF_ERROR(AgreeOnStatus(comm, c));
  SP_RETURN_IF_ERROR(persistent_->MarkCommitted(d->iteration, comm));
  return std::optional<int64_t>(d->iteration);
}

Result<TieredStep> TieredManager::Save(const State& state, int64_t iteration, Comm& comm,
                                       AsyncSaver* saver) {
  const int64_t k = options_.local_every, n = options_.persistent_every;
  TieredStep step;
  const bool local_due = k > 0 && iteration % k == 0;
  const bool pers_due = n > 0 && iteration % n == 0;
  if (!local_due && !pers_due) return step;
  SP_RETURN_IF_ERROR(Settle(comm));
  SP_ASSIGN_OR_RETURN(step.committed, FinishDrain(comm, false));
  if (pers_due && !options_.drain) {
    SP_RETURN_IF_ERROR(persistent_->Save(state, iteration, comm).status());
    step.persistent = true;
  }
  if (!local_due && !(pers_due && options_.drain)) return step;
  step.local = true;
  step.persistent = step.persistent || pers_due;
  // The local save writes into the pages of the checkpoint that retention
  // removes after it (recycle.h).
  internal_local::RecyclePolicy recycle{options_.keep_local, {}};
  if (std::optional<int64_t> d = draining()) recycle.busy.push_back(*d);
  if (saver != nullptr) {
    SP_ASSIGN_OR_RETURN(step.handle, internal_local::LocalSaveAsyncWith(
                                         *saver, state, iteration, comm, options_.local, &recycle));
    pending_ = step.handle;
    if (pers_due) drain_after_ = iteration;
    return step;
  }
  SP_RETURN_IF_ERROR(
      internal_local::LocalSaveWith(state, iteration, comm, options_.local, &recycle).status());
  if (pers_due) SP_RETURN_IF_ERROR(StartDrain(iteration, comm));
  SP_RETURN_IF_ERROR(RetainLocal(comm));
  return step;
}

Result<std::optional<int64_t>> TieredManager::Flush(Comm& comm) {
  SP_RETURN_IF_ERROR(Settle(comm));
  return FinishDrain(comm, true);
}

Result<std::optional<TieredResume>> TieredManager::Resume(State& state, Comm& comm,
                                                          const LoadOptions& load) {
  SP_RETURN_IF_ERROR(Flush(comm).status());
  SP_ASSIGN_OR_RETURN(std::optional<int64_t> local, LatestLocal(comm, options_.local));
  SP_ASSIGN_OR_RETURN(std::optional<int64_t> pers, persistent_->AgreeOnLatest(comm));
  LoadOptions o = load;
  internal_io::InheritUnset(options_.persistent, &o);
  TieredResume r;
  if (local && (!pers || *local >= *pers)) {
    const std::string pdir = pers && *pers == *local ? persistent_->PathFor(*local) : "";
    Result<LoadResult> got = LocalLoad(state, *local, comm, options_.local, pdir, o);
    if (got.ok() || got.status().code() != StatusCode::kDataLoss || !pers) {
      SP_RETURN_IF_ERROR(got.status());
      r.iteration = *local;
      r.from_local = true;
      r.load = *got;
      return std::make_optional(r);
    }
  }
  if (!pers) return std::optional<TieredResume>();  // neither tier has one
  SP_ASSIGN_OR_RETURN(r.load, Load(state, persistent_->PathFor(*pers), comm, o));
  r.iteration = *pers;
  return std::make_optional(r);
}

}  // namespace shardpoint
