// CheckpointManager (include/shardpoint/manager.h).
//
// The tracker protocol (rank 0, after the checkpoint's own commit):
//   1. write <root>/latest.tmp and fsync it;
//   2. rename it to <root>/latest;
//   3. fsync <root>.
// A crash before 2 leaves the previous `latest` (and maybe latest.tmp, which
// the next update overwrites); after 2 the new one. Either way `latest`
// names a complete checkpoint. Retention runs after 3, so a crash inside it
// only leaves extra directories behind.
#include "shardpoint/manager.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "src/checkpoint/commit.h"

namespace shardpoint {
namespace {

using internal::JoinPath;

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

// The lock's only errno conversion.
Status LockError(const std::string& what, int err) {
  return IOError(what + ": " + std::strerror(err));
}

std::string Hostname() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "unknown-host";
  return buf;
}

// "pid <pid> host <host>"; pid 0 if unparsable.
void ParseLock(const std::string& text, long* pid, std::string* host) {
  *pid = 0;
  host->clear();
  char h[256] = {};
  if (std::sscanf(text.c_str(), "pid %ld host %255s", pid, h) == 2) *host = h;
}

Result<std::string> ReadLock(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return LockError("open " + path, errno);
  char buf[512];
  ssize_t n = ::read(fd, buf, sizeof buf - 1);
  int err = errno;
  ::close(fd);
  if (n < 0) return LockError("read " + path, err);
  return std::string(buf, static_cast<size_t>(n));
}

// Takes `path` with O_EXCL, taking over a stale lock of a dead process on
// this host (once).
Status AcquireLock(const std::string& path, const std::string& token) {
  for (int attempt = 0; attempt < 2; ++attempt) {
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd >= 0) {
      ssize_t n = ::write(fd, token.data(), token.size());
      int err = errno;
      if (n != static_cast<ssize_t>(token.size()) || ::fsync(fd) != 0) {
        ::close(fd);
        ::unlink(path.c_str());
        return LockError("write lock file " + path, n < 0 ? err : EIO);
      }
      ::close(fd);
      return OkStatus();
    }
    if (errno != EEXIST) return LockError("create lock file " + path, errno);
    Result<std::string> held = ReadLock(path);
    if (!held.ok()) {
      if (::access(path.c_str(), F_OK) != 0) continue;  // released meanwhile
      return held.status();
    }
    long pid;
    std::string host;
    ParseLock(*held, &pid, &host);
    const bool stale =
        pid > 0 && host == Hostname() && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
    if (stale && attempt == 0) {
      ::unlink(path.c_str());  // a dead process on this host: take over
      continue;
    }
    return FailedPreconditionError(
        "checkpoint directory is locked by another job: lock file '" + path + "' is held by " +
        (pid > 0 ? "pid " + std::to_string(pid) + " on host '" + host + "'"
                 : "an unknown holder ('" + *held + "')") +
        "; two jobs must not write into the same directory. If that job is dead (and on "
        "another host), remove the lock file.");
  }
  return FailedPreconditionError("could not take lock file '" + path + "'");
}

}  // namespace

CheckpointManager::CheckpointManager(std::string root, const ManagerOptions& options)
    : root_(std::move(root)),
      options_(options),
      storage_(options.storage ? options.storage : DefaultStorage()) {}

CheckpointManager::~CheckpointManager() {
  if (lock_path_.empty()) return;
  // Release only a lock that is still ours.
  Result<std::string> held = ReadLock(lock_path_);
  if (held.ok() && *held == lock_token_) ::unlink(lock_path_.c_str());
}

Result<std::unique_ptr<CheckpointManager>> CheckpointManager::Open(const std::string& root,
                                                                   Comm& comm,
                                                                   const ManagerOptions& options) {
  if (root.empty()) return InvalidArgumentError("CheckpointManager: empty root directory");
  std::unique_ptr<CheckpointManager> m(new CheckpointManager(root, options));
  Status s;
  if (comm.rank() == 0) {
    s = m->storage_->CreateDirs(root);
    if (s.ok() && options.lock) {
      const std::string path = JoinPath(root, kLockName);
      const std::string token = "pid " + std::to_string(::getpid()) + " host " + Hostname() + "\n";
      s = AcquireLock(path, token);
      if (s.ok()) m->lock_path_ = path, m->lock_token_ = token;
    }
  }
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
                        storage_->Exists(JoinPath(JoinPath(root_, name), internal::kManifestName)));
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
  Status s;
  if (comm.rank() == 0) {
    s = [&]() -> Status {
      // The tracker: write, fsync, rename, fsync the directory.
      const std::string tmp = JoinPath(root_, std::string(kTracker) + ".tmp");
      SP_RETURN_IF_ERROR(storage_->WriteStringToFile(tmp, std::to_string(iteration) + "\n"));
      SP_RETURN_IF_ERROR(storage_->Rename(tmp, JoinPath(root_, kTracker)));
      SP_RETURN_IF_ERROR(storage_->SyncDir(root_));
      if (options_.keep_last <= 0) return OkStatus();
      // Retention.
      SP_ASSIGN_OR_RETURN(std::vector<int64_t> complete, CompleteIterations());
      if (complete.empty()) return OkStatus();
      const int64_t newest = complete.back();
      const size_t keep = static_cast<size_t>(options_.keep_last);
      for (size_t i = 0; i + keep < complete.size(); ++i) {
        if (complete[i] == iteration) continue;
        SP_RETURN_IF_ERROR(storage_->RemoveAll(PathFor(complete[i])));
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
    }();
  }
  return AgreeOnStatus(comm, s);
}

Result<SaveStats> CheckpointManager::Save(const State& state, int64_t iteration, Comm& comm,
                                          const SaveOptions& options) {
  SaveOptions o = options;
  if (!o.storage) o.storage = storage_;
  SP_ASSIGN_OR_RETURN(SaveStats stats, shardpoint::Save(state, PathFor(iteration), comm, o));
  SP_RETURN_IF_ERROR(MarkCommitted(iteration, comm));
  return stats;
}

SaveHandle CheckpointManager::SaveAsync(AsyncSaver& saver, const State& state, int64_t iteration,
                                        Comm& comm, const SaveOptions& options) {
  SaveOptions o = options;
  if (!o.storage) o.storage = storage_;
  return saver.Save(state, PathFor(iteration), comm, o, [this, iteration, &comm](const SaveStats&) {
    return MarkCommitted(iteration, comm);
  });
}

Result<std::optional<int64_t>> CheckpointManager::AgreeOnLatest(Comm& comm) const {
  std::string chosen;  // decimal, or empty: none
  Status s;
  if (comm.rank() == 0) {
    Result<std::optional<int64_t>> latest = LatestComplete();
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
  if (!o.storage) o.storage = storage_;
  SP_RETURN_IF_ERROR(Load(state, PathFor(*latest), comm, o).status());
  return *latest;
}

}  // namespace shardpoint
