// CheckpointManager (include/shardpoint/manager.h).
//
// The tracker protocol (rank 0, after the checkpoint's own commit):
//   1. write <root>/latest.tmp and fsync it;
//   2. rename it to <root>/latest;
//   3. fsync <root>.
// (Storage::CommitFile, not exclusive; on an object store one PUT, which
// replaces the object atomically.)
// A crash before 2 leaves the previous `latest` (and maybe latest.tmp, which
// the next update overwrites); after 2 the new one. Either way `latest`
// names a complete checkpoint. Retention runs after 3 and removes each
// checkpoint manifest first (internal_source::RemoveCheckpoint), so a crash inside
// it only leaves extra directories behind, none of them with a manifest and
// without its data.
#include "shardpoint/manager.h"

#include <algorithm>
#include <cstdio>

#include "src/base/guard.h"
#include "src/io/abandoned_writes.h"
#include "src/io/path.h"
#include "src/io/resources.h"
#include "src/source/manifest_read.h"
#include "src/source/remove_checkpoint.h"

namespace shardpoint {
namespace {

using internal_io::JoinPath;

constexpr char kTracker[] = "latest";
constexpr char kLockName[] = ".lock";
constexpr char kPrefix[] = "iter_";

// "iter_<digits>" exactly (not iter_..partial / .old of an overwrite).
std::optional<int64_t> ParseIteration(const std::string& name) {
  const size_t n = sizeof(kPrefix) - 1;
  if (name.size() <= n || name.compare(0, n, kPrefix) != 0 || name.size() > n + 18) {
    return std::nullopt;
  }
  int64_t v = 0;
  for (size_t i = n; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return std::nullopt;
    v = v * 10 + (name[i] - '0');
  }
  return v;
}

std::optional<int64_t> ParseDecimal(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  if (s.empty() || s.size() > 18) return std::nullopt;
  int64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + (c - '0');
  }
  return v;
}

}  // namespace

CheckpointManager::CheckpointManager(std::string root, const ManagerOptions& options)
    : root_(std::move(root)),
      options_(options),
      storage_(internal_io::CallResources(options).storage()) {}

Resources CheckpointManager::ResolvedResources() const {
  Resources r = options_;
  r.storage = storage_;
  return r;
}

CheckpointManager::~CheckpointManager() { Close().IgnoreError(); }

Status CheckpointManager::Close() {
  closed_ = true;
  if (lock_ == nullptr) return OkStatus();
  return storage_->UnlockFile(std::move(lock_));
}

Status CheckpointManager::CheckOpen() const {
  if (!closed_) return OkStatus();
  return FailedPreconditionError("the CheckpointManager of '" + root_ + "' is closed");
}

Result<std::unique_ptr<CheckpointManager>> CheckpointManager::Open(const std::string& root,
                                                                   Comm& comm,
                                                                   const ManagerOptions& options) {
  if (root.empty()) return InvalidArgumentError("CheckpointManager: empty root directory");
  std::unique_ptr<CheckpointManager> m(new CheckpointManager(root, options));
  Status s;
  if (comm.rank() == 0)
    s = internal_base::Guarded("opening '" + root + "'", [&]() -> Status {
      SP_RETURN_IF_ERROR(m->storage_->CreateDirs(root));
      if (!options.lock) return OkStatus();
      Result<std::unique_ptr<FileLock>> lock = m->storage_->LockFile(JoinPath(root, kLockName));
      if (lock.ok()) {
        m->lock_ = std::move(*lock);
        // On an object store, the uploads a crashed job's saves left open
        // (under the lock and before any save, none is this job's). Best
        // effort: what fails is left to the bucket's lifecycle rule.
        internal_io::AbortAbandonedWritesUnder(m->storage_, root, [](const std::string& rel) {
          return ParseIteration(rel.substr(0, rel.find('/'))).has_value();
        });
        return OkStatus();
      }
      if (lock.status().code() != StatusCode::kFailedPrecondition) return lock.status();
      return FailedPreconditionError("checkpoint directory '" + root +
                                     "' is locked by another job: " + lock.status().message() +
                                     "; two jobs must not write into the same directory");
    });
  SP_RETURN_IF_ERROR(AgreeOnStatus(comm, s));
  return m;
}

std::string CheckpointManager::PathFor(int64_t iteration) const {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%s%07lld", kPrefix, static_cast<long long>(iteration));
  return JoinPath(root_, buf);
}

Result<std::vector<int64_t>> CheckpointManager::CompleteIterations() const {
  SP_ASSIGN_OR_RETURN(std::vector<std::string> names, storage_->ListDir(root_));
  std::vector<int64_t> out;
  for (const std::string& name : names) {
    std::optional<int64_t> it = ParseIteration(name);
    if (!it) continue;
    SP_ASSIGN_OR_RETURN(bool complete,
                        internal_source::HasManifest(storage_, JoinPath(root_, name)));
    if (complete) out.push_back(*it);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

Result<std::optional<int64_t>> CheckpointManager::LatestComplete() const {
  SP_ASSIGN_OR_RETURN(std::vector<int64_t> its, CompleteIterations());
  if (its.empty()) return std::optional<int64_t>();
  return std::optional<int64_t>(its.back());
}

Result<std::optional<int64_t>> CheckpointManager::Tracker() const {
  const std::string path = JoinPath(root_, kTracker);
  SP_ASSIGN_OR_RETURN(bool exists, storage_->Exists(path));
  if (!exists) return std::optional<int64_t>();
  SP_ASSIGN_OR_RETURN(std::string text, storage_->ReadFileToString(path));
  std::optional<int64_t> it = ParseDecimal(text);
  if (!it)
    return DataLossError("tracker '" + path + "' does not hold an iteration: '" + text + "'");
  return it;
}

Status CheckpointManager::MarkCommitted(int64_t iteration, Comm& comm) {
  Status s = CheckOpen();
  if (s.ok() && comm.rank() == 0) {
    // The tracker: write, fsync, rename, fsync the directory (an object
    // store: one PUT, which replaces the object atomically).
    s = internal_base::Guarded("updating the tracker", [&]() -> Status {
      return storage_->CommitFile(JoinPath(root_, kTracker), std::to_string(iteration) + "\n",
                                  false);
    });
    if (s.ok()) {
      s = internal_base::Guarded("retention", [&] { return ApplyRetention(iteration); });
      if (!s.ok()) {
        s = Status(s.code(), "checkpoint '" + PathFor(iteration) + "' committed and '" +
                                 JoinPath(root_, kTracker) +
                                 "' names it, but retention failed: " + s.message());
      }
    } else {
      s = Status(s.code(), "checkpoint '" + PathFor(iteration) +
                               "' committed (it is complete and loads; resume finds it), but "
                               "updating '" +
                               JoinPath(root_, kTracker) + "' failed: " + s.message());
    }
  } else if (!s.ok()) {
    s = Status(s.code(), "checkpoint '" + PathFor(iteration) + "' committed, but '" +
                             JoinPath(root_, kTracker) + "' was not updated: " + s.message());
  }
  return AgreeOnStatus(comm, s);
}

Status CheckpointManager::ApplyRetention(int64_t iteration) {
  if (options_.keep_last <= 0) return OkStatus();
  SP_ASSIGN_OR_RETURN(std::vector<int64_t> complete, CompleteIterations());
  if (complete.empty()) return OkStatus();
  const int64_t newest = complete.back();
  const size_t keep = static_cast<size_t>(options_.keep_last);
  for (size_t i = 0; i + keep < complete.size(); ++i) {
    if (complete[i] == iteration) continue;
    SP_RETURN_IF_ERROR(internal_source::RemoveCheckpoint(storage_, PathFor(complete[i])));
  }
  SP_ASSIGN_OR_RETURN(std::vector<std::string> names, storage_->ListDir(root_));
  for (const std::string& name : names) {
    std::optional<int64_t> it = ParseIteration(name);
    if (!it || *it >= newest || *it == iteration ||
        std::binary_search(complete.begin(), complete.end(), *it)) {
      continue;
    }
    SP_RETURN_IF_ERROR(storage_->RemoveAll(JoinPath(root_, name)));  // a killed save
  }
  return storage_->SyncDir(root_);
}

Result<SaveStats> CheckpointManager::Save(const State& state, int64_t iteration, Comm& comm,
                                          const SaveOptions& options) {
  SP_RETURN_IF_ERROR(CheckOpen());
  SaveOptions o = options;
  internal_io::InheritUnset(ResolvedResources(), &o);
  SP_ASSIGN_OR_RETURN(SaveStats stats, shardpoint::Save(state, PathFor(iteration), comm, o));
  SP_RETURN_IF_ERROR(MarkCommitted(iteration, comm));
  return stats;
}

SaveHandle CheckpointManager::SaveAsync(AsyncSaver& saver, const State& state, int64_t iteration,
                                        Comm& comm, const SaveOptions& options) {
  SaveOptions o = options;
  internal_io::InheritUnset(ResolvedResources(), &o);
  return saver.Save(state, PathFor(iteration), comm, o, [this, iteration, &comm](const SaveStats&) {
    return MarkCommitted(iteration, comm);
  });
}

Result<std::optional<int64_t>> CheckpointManager::AgreeOnLatest(Comm& comm) const {
  std::string chosen;  // decimal, or empty: none
  Status s;
  if (comm.rank() == 0) {
    Result<std::optional<int64_t>> latest =
        internal_base::Guarded("finding the latest checkpoint", [&] { return LatestComplete(); });
    s = latest.status();
    if (s.ok() && *latest) chosen = std::to_string(**latest);
  }
  SP_RETURN_IF_ERROR(AgreeOnStatus(comm, s));
  SP_RETURN_IF_ERROR(comm.Broadcast(&chosen, 0));
  if (chosen.empty()) return std::optional<int64_t>();
  return std::optional<int64_t>(std::stoll(chosen));
}

Result<int64_t> CheckpointManager::Resume(State& state, Comm& comm, const LoadOptions& options) {
  SP_ASSIGN_OR_RETURN(std::optional<int64_t> latest, AgreeOnLatest(comm));
  if (!latest) {
    return NotFoundError("no complete checkpoint under '" + root_ +
                         "' (iter_* directories with a manifest)");
  }
  LoadOptions o = options;
  internal_io::InheritUnset(ResolvedResources(), &o);
  SP_RETURN_IF_ERROR(Load(state, PathFor(*latest), comm, o).status());
  return *latest;
}

}  // namespace shardpoint
