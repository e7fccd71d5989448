// Crash trials: runs tests/crash/crash_saver, kills it with SIGKILL, and
// checks after every kill what the manager promises (docs/reliability.md):
//
//   - the lock is taken over: the next run's Open succeeds (the saver exits 3
//     otherwise) and so does a final Open by this driver;
//   - `latest`, when present, names a complete checkpoint;
//   - no acknowledged save is lost: the newest complete checkpoint is at
//     least the newest iteration any run printed "ACK" for;
//   - every complete checkpoint passes verify and loads bit for bit (and the
//     next run's Resume checks the newest one again, exit 4 otherwise).
//
// Kills come at a random time (a save, an async save's background commit,
// the `latest` update or retention may be under way) or at the Nth metadata
// system call (kill_shim.so in LD_PRELOAD: rename, unlink, rmdir, mkdir,
// fsync, ...; before or after the call), N drawn from the range a calibration
// run measured, or every N in turn (--every-call). --mpi-trials adds trials
// that SIGKILL one rank of an `mpirun -np 4` job.
//
//   crash_trials --saver P --shim P --dir D [--trials N] [--seed S] [--kb KB]
//                [--every-call] [--mpi-trials M --mpiexec P [--mpi-flag F]...]
//                [--root R]
//
// --root: the manager's root (default D/single). An s3:// root (the object
// store from the AWS environment; tests/s3) gets a unique suffix, so reruns
// against one server start fresh; its kills are all at random times (no
// metadata system calls to kill at) and the savers run without the lock (a
// killed job's lease would block the next run for a lease); after the
// trials a manager takes the lock, and no upload the killed savers left
// open may remain under the root.
//
// Prints one line per trial and a summary; exit 0 iff every check held.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "shardpoint/checkpoint.h"
#include "shardpoint/manager.h"
#include "shardpoint/verify.h"
#include "src/objstore/s3_client.h"
#include "src/objstore/s3_options.h"
#include "src/objstore/s3_storage.h"
#include "tests/crash/crash_state.h"

namespace sp = shardpoint;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

struct Args {
  std::string saver, shim, dir, mpiexec, root;
  std::vector<std::string> mpi_flags;
  int trials = 20, mpi_trials = 0;
  bool shard_manifest = false;  // the savers shard every manifest (owners' shards files)
  uint32_t seed = 1;
  int64_t kb = 256;
  bool every_call = false;
};

struct Run {
  std::string out;      // the saver's stdout (ACK lines)
  int status = 0;       // waitpid status
  bool killed = false;  // we sent SIGKILL (or the shim did)
  double seconds = 0;
};

int failures = 0;

void Fail(const std::string& what) {
  ++failures;
  std::printf("FAIL: %s\n", what.c_str());
  std::fflush(stdout);
}

// Starts argv with extra environment; stdout comes back through a pipe. If
// kill_after_s >= 0, SIGKILLs the process (group) that long after the start.
// `pid_ready`, if set, is polled before the clock starts (MPI: all ranks up).
Run Spawn(const std::vector<std::string>& argv, const std::vector<std::string>& env,
          double kill_after_s, bool own_group = false,
          const std::function<pid_t()>& victim = nullptr) {
  int fds[2];
  if (pipe(fds) != 0) std::abort();
  const Clock::time_point start = Clock::now();
  pid_t pid = fork();
  if (pid == 0) {
    if (own_group) setpgid(0, 0);
    dup2(fds[1], 1);
    close(fds[0]);
    close(fds[1]);
    for (const std::string& e : env) putenv(const_cast<char*>(e.c_str()));
    std::vector<char*> a;
    for (const std::string& s : argv) a.push_back(const_cast<char*>(s.c_str()));
    a.push_back(nullptr);
    execv(a[0], a.data());
    _exit(127);
  }
  close(fds[1]);
  Run run;
  bool sent = kill_after_s < 0;
  const double hang_s = 120;
  for (;;) {
    double now = std::chrono::duration<double>(Clock::now() - start).count();
    int wait_ms = 50;
    if (!sent) {
      if (now >= kill_after_s) {
        pid_t target = victim ? victim() : pid;
        if (target > 0) {
          kill(target, SIGKILL);
          run.killed = true;
          sent = true;
        }
      } else {
        wait_ms = std::max(1, std::min(50, static_cast<int>((kill_after_s - now) * 1000)));
      }
    }
    if (now > hang_s) {
      Fail(argv[0] + std::string(" still running after ") + std::to_string(hang_s) + " s");
      kill(own_group ? -pid : pid, SIGKILL);
    }
    pollfd p{fds[0], POLLIN, 0};
    if (poll(&p, 1, wait_ms) > 0) {
      char buf[4096];
      ssize_t n = read(fds[0], buf, sizeof buf);
      if (n > 0) {
        run.out.append(buf, static_cast<size_t>(n));
        continue;
      }
      if (n == 0) break;  // every writer is gone
    }
  }
  close(fds[0]);
  waitpid(pid, &run.status, 0);
  if (own_group) kill(-pid, SIGKILL);  // any rank left behind
  run.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (WIFSIGNALED(run.status) && WTERMSIG(run.status) == SIGKILL) run.killed = true;
  return run;
}

int64_t MaxAck(const std::string& out) {
  int64_t best = -1;
  size_t pos = 0;
  while ((pos = out.find("ACK ", pos)) != std::string::npos) {
    best = std::max<int64_t>(best, std::atoll(out.c_str() + pos + 4));
    pos += 4;
  }
  return best;
}

// Every check of the header comment, on `root` saved by `world` ranks.
// Returns the number of complete checkpoints checked.
int Check(const std::string& root, int world, int64_t acked, int64_t kb, bool take_lock) {
  std::unique_ptr<sp::Comm> comm = sp::MakeSingleComm();
  sp::ManagerOptions mo;
  mo.lock = take_lock;  // the next saver takes the lock over itself
  auto m = sp::CheckpointManager::Open(root, *comm, mo);
  if (!m.ok()) {
    Fail("Open " + root + ": " + m.status().ToString());
    return 0;
  }
  auto complete = (*m)->CompleteIterations();
  auto tracker = (*m)->Tracker();
  if (!complete.ok() || !tracker.ok()) {
    Fail("list " + root + ": " + complete.status().ToString() + tracker.status().ToString());
    return 0;
  }
  int64_t newest = complete->empty() ? -1 : complete->back();
  if (acked > newest) {
    Fail("acknowledged iteration " + std::to_string(acked) + " lost: newest complete is " +
         std::to_string(newest));
  }
  if (tracker->has_value()) {
    int64_t t = **tracker;
    if (std::find(complete->begin(), complete->end(), t) == complete->end()) {
      Fail("`latest` names iteration " + std::to_string(t) + ", which is not complete");
    }
  }
  for (int64_t it : *complete) {
    const std::string dir = (*m)->PathFor(it);
    auto report = sp::VerifyCheckpoint(dir);
    if (!report.ok()) {
      Fail("verify " + dir + ": " + report.status().ToString());
    } else if (!report->ok()) {
      Fail("verify " + dir + ": " + report->faults.front().message);
    }
    sp::crash::CrashState cs;
    sp::crash::Build(&cs, kb, 0, 1, world);
    cs.state.common = "";
    auto loaded = sp::Load(cs.state, dir, *comm);
    if (!loaded.ok()) {
      Fail("load " + dir + ": " + loaded.status().ToString());
      continue;
    }
    std::string bad = sp::crash::Mismatch(cs, it, kb, 0, 1);
    if (!bad.empty()) Fail("load " + dir + ": " + bad);
  }
  return static_cast<int>(complete->size());
}

std::string Describe(const Run& r) {
  if (r.killed) return "killed";
  if (WIFEXITED(r.status)) return "exit " + std::to_string(WEXITSTATUS(r.status));
  return "signal " + std::to_string(WTERMSIG(r.status));
}

Args Parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string f = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "missing value after %s\n", f.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (f == "--saver")
      a.saver = next();
    else if (f == "--shim")
      a.shim = next();
    else if (f == "--dir")
      a.dir = next();
    else if (f == "--trials")
      a.trials = std::atoi(next().c_str());
    else if (f == "--seed")
      a.seed = static_cast<uint32_t>(std::atoll(next().c_str()));
    else if (f == "--kb")
      a.kb = std::atoll(next().c_str());
    else if (f == "--every-call")
      a.every_call = true;
    else if (f == "--mpi-trials")
      a.mpi_trials = std::atoi(next().c_str());
    else if (f == "--mpiexec")
      a.mpiexec = next();
    else if (f == "--mpi-flag")
      a.mpi_flags.push_back(next());
    else if (f == "--root")
      a.root = next();
    else if (f == "--shard-manifest")
      a.shard_manifest = true;
    else {
      std::fprintf(stderr, "unknown flag %s\n", f.c_str());
      std::exit(2);
    }
  }
  if (a.saver.empty() || a.shim.empty() || a.dir.empty()) {
    std::fprintf(stderr, "usage: crash_trials --saver P --shim P --dir D [--trials N] ...\n");
    std::exit(2);
  }
  return a;
}

// An object store: the killed savers left multipart uploads open (parts
// stored, no object, invisible to listings). The next manager to take the
// lock aborts those under the root's iterations: none may be left after it.
void CheckNoUploadLeftOpen(const std::string& root) {
  namespace os = sp::internal_objstore;
  std::string bucket, prefix;
  sp::Result<os::S3Options> options = os::ResolveS3Options(os::S3Options());
  sp::Result<std::unique_ptr<os::S3Client>> client = options.status();
  if (options.ok()) client = os::S3Client::Make(*options);
  if (!os::ParseS3Path(root, &bucket, &prefix).ok() || !client.ok()) {
    Fail("an S3 client for " + root + ": " + client.status().ToString());
    return;
  }
  auto before = (*client)->ListMultipartUploads(bucket, prefix + "/");
  std::unique_ptr<sp::Comm> comm = sp::MakeSingleComm();
  auto m = sp::CheckpointManager::Open(root, *comm, sp::ManagerOptions());
  auto after = (*client)->ListMultipartUploads(bucket, prefix + "/");
  if (!m.ok() || !before.ok() || !after.ok()) {
    Fail("open uploads under " + root + ": " + m.status().ToString() + before.status().ToString() +
         after.status().ToString());
    return;
  }
  if (!after->empty()) {
    Fail(std::to_string(after->size()) + " uploads still open under " + root + " (" +
         after->front().key + ") after the manager took the lock");
  }
  std::printf(
      "object store: %zu uploads the killed savers left open, %zu after a manager took "
      "the lock\n",
      before->size(), after->size());
  (*m)->Close().IgnoreError();
}

}  // namespace

int main(int argc, char** argv) {
  Args a = Parse(argc, argv);
  std::mt19937 rng(a.seed);
  fs::remove_all(a.dir);
  fs::create_directories(a.dir);
  const bool s3 = a.root.starts_with("s3://");
  const std::string root =
      a.root.empty() ? a.dir + "/single"
      : s3           ? a.root + "/run-" + std::to_string(Clock::now().time_since_epoch().count())
                     : a.root;
  const std::string count_file = a.dir + "/calls";
  const std::string kb = std::to_string(a.kb);
  // ASan (the sanitizer build) refuses to run after another preloaded library
  // unless told not to check.
  const std::string preload = "LD_PRELOAD=" + a.shim;
  const std::string asan = "ASAN_OPTIONS=verify_asan_link_order=0:detect_leaks=0";
  auto saver = [&](int iters, const std::string& mode) {
    std::vector<std::string> argv = {
        a.saver, root, "--iters", std::to_string(iters), "--keep", "2", "--kb", kb, "--mode", mode};
    if (s3) argv.push_back("--no-lock");
    if (a.shard_manifest) argv.push_back("--shard-manifest");
    return argv;
  };

  // Calibration: one run to the end measures its time and its metadata calls.
  Run cal = Spawn(saver(4, "mixed"), {preload, asan, "SP_CRASH_COUNT_FILE=" + count_file}, -1);
  int64_t calls = 0;
  std::ifstream(count_file) >> calls;
  int64_t acked = MaxAck(cal.out);
  if (cal.killed || !WIFEXITED(cal.status) || WEXITSTATUS(cal.status) != 0 || (calls <= 0 && !s3)) {
    Fail("calibration run: " + Describe(cal) + ", " + std::to_string(calls) + " calls");
    return 1;
  }
  std::printf("calibration: 4 saves in %.3f s, %lld metadata calls\n", cal.seconds,
              static_cast<long long>(calls));
  Check(root, 1, acked, a.kb, false);

  int time_kills = 0, call_kills = 0, checked = 0;
  for (int t = 0; t < a.trials && failures == 0; ++t) {
    const int iters = a.every_call ? 4 : 1 + static_cast<int>(rng() % 4);
    const char* modes[] = {"sync", "async", "mixed"};
    const std::string mode = modes[rng() % 3];
    std::vector<std::string> env = {preload, asan};
    double kill_at = -1;
    std::string how;
    if (!s3 && (a.every_call || rng() % 2 == 0)) {
      // A run of `iters` saves makes about calls * iters / 4 calls.
      const int64_t range = std::max<int64_t>(1, calls * iters / 4);
      int64_t n = a.every_call ? 1 + t % calls : 1 + static_cast<int64_t>(rng() % range);
      bool after = a.every_call ? (t / calls) % 2 == 1 : rng() % 2 == 1;
      env.push_back("SP_CRASH_KILL_AT=" + std::to_string(n));
      if (after) env.push_back("SP_CRASH_KILL_AFTER=1");
      how = "metadata call " + std::to_string(n) + (after ? " (after)" : " (before)");
      ++call_kills;
    } else {
      std::uniform_real_distribution<double> d(0, cal.seconds * 1.2 * iters / 4);
      kill_at = d(rng);
      how = "after " + std::to_string(kill_at).substr(0, 5) + " s";
      ++time_kills;
    }
    Run r = Spawn(saver(iters, mode), env, kill_at);
    acked = std::max(acked, MaxAck(r.out));
    bool ok_exit = r.killed || (WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0);
    if (!ok_exit) Fail("trial " + std::to_string(t) + ": saver " + Describe(r));
    int n = Check(root, 1, acked, a.kb, false);
    checked += n;
    std::printf("trial %d: %s, %d saves %s, %s; acked up to %lld, %d complete checkpoints ok\n", t,
                how.c_str(), iters, mode.c_str(), Describe(r).c_str(),
                static_cast<long long>(acked), n);
    std::fflush(stdout);
  }
  // The last kill's lock, taken over by an Open that takes it.
  Check(root, 1, acked, a.kb, true);

  // One rank of an mpirun -np 4 job killed.
  int mpi_done = 0;
  int64_t mpi_acked = -1;
  const std::string mroot = a.dir + "/mpi", pids = a.dir + "/pids";
  for (int t = 0; t < a.mpi_trials && failures == 0; ++t) {
    fs::remove_all(pids);
    fs::create_directories(pids);
    std::vector<std::string> cmd = {a.mpiexec};
    for (const std::string& f : a.mpi_flags) cmd.push_back(f);
    for (const char* s : {"-np", "4"}) cmd.push_back(s);
    for (const std::string& s :
         {a.saver, mroot, std::string("--mpi"), std::string("--pid-dir"), pids,
          std::string("--iters"), std::string("12"), std::string("--kb"), kb, std::string("--mode"),
          std::string(t % 2 ? "async" : "mixed")}) {
      cmd.push_back(s);
    }
    if (a.shard_manifest) cmd.push_back("--shard-manifest");
    const int victim_rank = static_cast<int>(rng() % 4);
    // Kill once every rank is up (its pid file exists) and a random delay.
    std::uniform_real_distribution<double> d(0, 0.5);
    const double delay = d(rng);
    Clock::time_point up{};
    auto victim = [&]() -> pid_t {
      for (int r = 0; r < 4; ++r) {
        if (!fs::exists(pids + "/rank" + std::to_string(r))) return 0;
      }
      if (up == Clock::time_point{}) up = Clock::now();
      if (std::chrono::duration<double>(Clock::now() - up).count() < delay) return 0;
      int pid = 0;
      std::ifstream(pids + "/rank" + std::to_string(victim_rank)) >> pid;
      return pid;
    };
    Run r = Spawn(cmd, {"OMPI_MCA_btl_vader_single_copy_mechanism=none"}, 0, true, victim);
    mpi_acked = std::max(mpi_acked, MaxAck(r.out));
    size_t failed = r.out.find("FAILED");
    if (failed != std::string::npos) {
      Fail("mpi trial " + std::to_string(t) + ": a rank " +
           r.out.substr(failed, r.out.find('\n', failed) - failed));
    }
    // mpirun itself exits non-zero once a rank is killed: expected. A rank
    // that failed on its own (lock not taken over, resumed state wrong)
    // says so on stderr, which the test log shows.
    int n = Check(mroot, 4, mpi_acked, a.kb, false);
    checked += n;
    ++mpi_done;
    const bool done = r.out.find("DONE") != std::string::npos;
    Run mpirun = r;
    mpirun.killed = false;  // the victim was; say how mpirun ended
    std::printf(
        "mpi trial %d: rank %d killed %.3f s after start-up%s, mpirun %s in %.2f s; "
        "acked up to %lld, %d complete checkpoints ok\n",
        t, victim_rank, delay, done ? " (after the job had finished)" : "",
        Describe(mpirun).c_str(), r.seconds, static_cast<long long>(mpi_acked), n);
    std::fflush(stdout);
  }
  if (mpi_done > 0) {
    // The next job after the last kill starts, takes the lock over, resumes.
    std::vector<std::string> cmd = {a.mpiexec};
    for (const std::string& f : a.mpi_flags) cmd.push_back(f);
    for (const std::string& s :
         {std::string("-np"), std::string("4"), a.saver, mroot, std::string("--mpi"),
          std::string("--iters"), std::string("1"), std::string("--kb"), kb}) {
      cmd.push_back(s);
    }
    Run r = Spawn(cmd, {"OMPI_MCA_btl_vader_single_copy_mechanism=none"}, -1, true);
    if (!WIFEXITED(r.status) || WEXITSTATUS(r.status) != 0 ||
        r.out.find("FAILED") != std::string::npos) {
      Fail("mpirun after the last kill: " + Describe(r) + "\n" + r.out);
    }
    mpi_acked = std::max(mpi_acked, MaxAck(r.out));
    Check(mroot, 4, mpi_acked, a.kb, true);
  }

  if (s3) CheckNoUploadLeftOpen(root);
  std::printf(
      "crash_trials: %d trials (%d at a random time, %d at a metadata call of %lld), "
      "%d mpirun -np 4 trials; newest acknowledged iteration %s (mpirun jobs: %s), none lost; "
      "%d complete checkpoints verified and loaded bit for bit; %d failures\n",
      time_kills + call_kills, time_kills, call_kills, static_cast<long long>(calls), mpi_done,
      acked < 0 ? "none" : std::to_string(acked).c_str(),
      mpi_acked < 0 ? "none" : std::to_string(mpi_acked).c_str(), checked, failures);
  return failures == 0 ? 0 : 1;
}
