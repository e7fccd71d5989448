// Kill trials of the local tier: a job of 4 thread ranks on 2 nodes (a root
// directory each) saving local checkpoints in a loop is SIGKILLed during a
// local save or its replication, and the checkpoints it acknowledged must
// still recover (docs/local-tier.md#guarantees).
//
//   local_kill_trials --dir D [--trials N] [--seed S] [--shim kill_shim.so]
//   local_kill_trials saver D [MAX]    (the job; run by the driver)
//
// The saver saves iterations 1, 2, ... (MAX, default unbounded), each the
// reference model of seed = iteration, and prints "BEGIN <it>" as it calls
// LocalSave and "ACK <it>" once LocalSave returned (replicas verified, every
// node's replica map written). It saves as the TieredManager does with
// keep_local 2 (src/local/recycle.h): save 3 writes over the pages of
// iteration 1 (moved aside as spares in its step 0), so the kills land in
// a save that recycles an older checkpoint. Trials alternate two kinds of
// kill:
//   * time: save 2 is timed (BEGIN to ACK); save 3 is killed at a random
//     moment after its BEGIN, uniform over that time, so the kill lands in
//     the local write or in the replication in proportion to their length;
//   * call (with --shim): kill_shim.so SIGKILLs the job at its Nth metadata
//     system call (mkdir, rename, unlink, fsync, ...), before or after it,
//     N drawn from the calls of saves 2 and 3 (a calibration run counts
//     them), or from the last 3 calls of save 2, the replication's commit
//     points (manifest.tmp and replicas.tmp renames on every node).
// After each kill, and again with one node wiped (node 0 or 1 in turn):
// LatestLocal is the last ACKed iteration or the one after it, and both
// (where LatestLocal names the next) load bit for bit with LocalLoad on 4
// ranks, from the surviving node's copies. Where
// the kill landed (no manifest yet: the local write; a manifest, no replica
// map on some node: the replication) is counted and printed.
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "shardpoint/local_tier.h"
#include "src/local/local_save.h"
#include "tests/testing/transformer.h"

namespace sp = shardpoint;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

// Under ASan the shim comes before the ASan runtime in the preload list (the
// same options crash_trials passes its savers).
const char* const kAsan = "ASAN_OPTIONS=verify_asan_link_order=0:detect_leaks=0";

const sp::testing::ModelConfig kModel{1, 32, 64, 128};
const sp::testing::ParallelConfig kLayout{2, 1, 2, true};
constexpr int kRanks = 4, kPerNode = 2;

sp::LocalTierOptions Options(const std::string& dir, int rank) {
  sp::LocalTierOptions o;
  o.local_root = dir + "/node" + std::to_string(rank / kPerNode);
  o.node_id = "node" + std::to_string(rank / kPerNode);
  o.round_bytes = 4 << 10;  // replication in several rounds
  return o;
}

std::vector<sp::testing::RankState> States(uint64_t seed, bool fill) {
  const sp::testing::RefModel ref = sp::testing::MakeReference(kModel, seed);
  std::vector<sp::testing::RankState> out(kRanks);
  for (int r = 0; r < kRanks; ++r) {
    sp::Result<sp::testing::RankState> rs = sp::testing::BuildRankState(kModel, kLayout, r);
    if (!rs.ok()) std::abort();
    out[r] = std::move(*rs);
    if (fill) {
      (void)sp::testing::FillFromReference(ref, out[r].state.tensors);
    } else {
      for (sp::Object& o : out[r].state.objects) o.bytes.clear();
    }
  }
  return out;
}

int RunSaver(const std::string& dir, int64_t max) {
  for (int64_t it = 1; max <= 0 || it <= max; ++it) {
    std::vector<sp::testing::RankState> s = States(it, true);
    std::printf("BEGIN %lld\n", static_cast<long long>(it));
    std::fflush(stdout);
    for (sp::Status st : sp::RunThreadRanks(kRanks, [&](sp::Comm& comm) {
           const sp::internal_local::RecyclePolicy keep2{2, {}};
           return sp::internal_local::LocalSaveWith(s[comm.rank()].state, it, comm,
                                                    Options(dir, comm.rank()), &keep2)
               .status();
         })) {
      if (!st.ok()) {
        std::fprintf(stderr, "saver: %s\n", st.ToString().c_str());
        return 2;
      }
    }
    std::printf("ACK %lld\n", static_cast<long long>(it));
    std::fflush(stdout);
  }
  return 0;
}

struct Child {
  pid_t pid = -1;
  int out = -1;
};

Child Spawn(const std::string& self, const std::string& dir, int64_t max,
            const std::vector<std::string>& env) {
  int p[2];
  if (pipe(p) != 0) std::abort();
  Child c;
  c.pid = fork();
  if (c.pid == 0) {
    dup2(p[1], 1);
    close(p[0]);
    close(p[1]);
    for (const std::string& e : env) putenv(const_cast<char*>(e.c_str()));
    const std::string m = std::to_string(max);
    execl(self.c_str(), self.c_str(), "saver", dir.c_str(), m.c_str(), nullptr);
    _exit(127);
  }
  close(p[1]);
  c.out = p[0];
  return c;
}

// The iteration of the next line "<word> <it>" within `timeout_ms`, skipping
// other lines, or -1 (EOF, timeout).
int64_t Next(int fd, const std::string& word, int timeout_ms) {
  while (true) {
    std::string line;
    char ch;
    while (true) {
      pollfd pf{fd, POLLIN, 0};
      if (poll(&pf, 1, timeout_ms) <= 0) return -1;
      if (read(fd, &ch, 1) != 1) return -1;
      if (ch == '\n') break;
      line += ch;
    }
    if (line.rfind(word + " ", 0) == 0) return std::atoll(line.c_str() + word.size() + 1);
  }
}

int64_t NextAck(int fd, int timeout_ms) { return Next(fd, "ACK", timeout_ms); }

// Reads what is left of the child's ACKs (a kill may race one out).
int64_t Drain(int fd, int64_t acked) {
  for (int64_t a; (a = NextAck(fd, 0)) > 0;) acked = a;
  return acked;
}

bool Failed(const std::string& what) {
  std::printf("  FAILED: %s\n", what.c_str());
  return true;
}

// LocalLoad of `it` on 4 ranks, checked against its reference.
sp::Status LoadChecked(const std::string& dir, int64_t it) {
  std::vector<sp::testing::RankState> dst = States(0, false);
  for (sp::Status s : sp::RunThreadRanks(kRanks, [&](sp::Comm& comm) -> sp::Status {
         SP_RETURN_IF_ERROR(
             sp::LocalLoad(dst[comm.rank()].state, it, comm, Options(dir, comm.rank())).status());
         return sp::testing::CheckAgainstReference(sp::testing::MakeReference(kModel, it),
                                                   dst[comm.rank()].state.tensors);
       })) {
    SP_RETURN_IF_ERROR(s);
  }
  return sp::OkStatus();
}

std::string Phase(const std::string& dir, int64_t it) {
  char name[32];
  std::snprintf(name, sizeof name, "/iter_%07lld", static_cast<long long>(it));
  bool manifest = false, all_maps = true;
  for (int n = 0; n < kRanks / kPerNode; ++n) {
    const std::string d = dir + "/node" + std::to_string(n) + name;
    manifest = manifest || fs::exists(d + "/manifest");
    all_maps = all_maps && fs::exists(d + "/replicas");
  }
  if (!manifest) return "in the local write";
  return all_maps ? "after the commit" : "in the replication";
}

// LatestLocal on 4 ranks, or nullopt with *error set.
std::optional<int64_t> Latest(const std::string& dir, std::string* error) {
  std::optional<int64_t> latest;
  for (sp::Status s : sp::RunThreadRanks(kRanks, [&](sp::Comm& comm) -> sp::Status {
         SP_ASSIGN_OR_RETURN(auto l, sp::LatestLocal(comm, Options(dir, comm.rank())));
         if (comm.rank() == 0) latest = l;
         return sp::OkStatus();
       })) {
    if (!s.ok()) *error = "LatestLocal: " + s.ToString();
  }
  return latest;
}

// One trial's checks, before and after node `lost` is wiped: LatestLocal is
// the ACKed iteration or the next, and it and the ACKed one load bit for
// bit. Returns whether any failed.
bool Check(const std::string& dir, int64_t acked, int lost) {
  bool failed = false;
  for (int pass = 0; pass < 2; ++pass) {
    const std::string when = pass == 0 ? "" : "node " + std::to_string(lost) + " wiped: ";
    if (pass == 1) fs::remove_all(dir + "/node" + std::to_string(lost));
    std::string error;
    const std::optional<int64_t> latest = Latest(dir, &error);
    if (!error.empty()) return Failed(when + error);
    if (!latest || *latest < acked || *latest > acked + 1) {
      return Failed(when + "LatestLocal " + (latest ? std::to_string(*latest) : "none") +
                    ", ACKed " + std::to_string(acked));
    }
    for (int64_t it = acked; it <= *latest; ++it) {
      sp::Status s = LoadChecked(dir, it);
      if (!s.ok()) failed = Failed(when + "iteration " + std::to_string(it) + ": " + s.ToString());
    }
  }
  return failed;
}

// Calls the shim counts in a run of `max` saves (kill_shim's count file).
int64_t CountCalls(const std::string& self, const std::string& dir, const std::string& shim,
                   int64_t max) {
  fs::remove_all(dir);
  const std::string count = dir + ".count";
  Child c = Spawn(self, dir, max, {"LD_PRELOAD=" + shim, kAsan, "SP_CRASH_COUNT_FILE=" + count});
  while (NextAck(c.out, 60000) > 0) {
  }
  int st = 0;
  waitpid(c.pid, &st, 0);
  close(c.out);
  std::ifstream in(count);
  int64_t n = -1;
  in >> n;
  fs::remove(count);
  return n;
}

int RunTrials(const std::string& self, const std::string& dir, int trials, uint32_t seed,
              const std::string& shim) {
  std::mt19937_64 rng(seed);
  int64_t c1 = 0, c3 = 0;
  if (!shim.empty()) {
    c1 = CountCalls(self, dir, shim, 1);
    c3 = CountCalls(self, dir, shim, 3);
    std::printf("calibration: %lld metadata calls for 1 save, %lld for 3\n",
                static_cast<long long>(c1), static_cast<long long>(c3));
    if (c1 <= 0 || c3 <= c1) {
      Failed("calibration");
      return 1;
    }
  }
  int failures = 0;
  std::map<std::string, int> phases;
  for (int t = 0; t < trials; ++t) {
    fs::remove_all(dir);
    const int kind = shim.empty() ? 0 : t % 3;
    const bool by_call = kind != 0;
    std::vector<std::string> env;
    std::string how;
    if (by_call) {
      // kind 1: any call of saves 2 and 3; kind 2: one of the last 3 calls of
      // save 2 (its replication's commits: the manifest on the other node,
      // each node's replica map).
      const int64_t per_save = (c3 - c1) / 2;
      const int64_t n = kind == 1 ? c1 + 1 + static_cast<int64_t>(rng() % (c3 - c1))
                                  : c1 + per_save - static_cast<int64_t>(rng() % 3);
      env = {"LD_PRELOAD=" + shim, kAsan, "SP_CRASH_KILL_AT=" + std::to_string(n)};
      if (rng() % 2) env.push_back("SP_CRASH_KILL_AFTER=1");
      how = "metadata call " + std::to_string(n) + (env.size() > 2 ? " (after)" : " (before)");
    }
    Child c = Spawn(self, dir, by_call ? 3 : 0, env);
    int64_t acked = NextAck(c.out, 60000);
    if (!by_call && acked > 0) {  // one save timed (BEGIN to ACK), the next one killed
      Next(c.out, "BEGIN", 60000);
      const auto t1 = Clock::now();
      const int64_t second = NextAck(c.out, 60000);
      const double period = std::chrono::duration<double>(Clock::now() - t1).count();
      if (second > 0) acked = second;
      Next(c.out, "BEGIN", 60000);
      const double wait = std::uniform_real_distribution<double>(0, period)(rng);
      std::this_thread::sleep_for(std::chrono::duration<double>(wait));
      kill(c.pid, SIGKILL);
      char buf[48];
      std::snprintf(buf, sizeof buf, "time %.1f ms into a %.1f ms save", wait * 1e3, period * 1e3);
      how = buf;
    }
    if (by_call) {
      while (true) {
        const int64_t a = NextAck(c.out, 60000);
        if (a <= 0) break;
        acked = a;
      }
    }
    int st = 0;
    waitpid(c.pid, &st, 0);
    acked = Drain(c.out, acked);
    close(c.out);
    const bool killed = WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL;
    if (!killed || acked <= 0) {
      std::printf("trial %d (%s): %s, ACKed %lld\n", t, how.c_str(),
                  killed ? "killed before the first ACK" : "not killed",
                  static_cast<long long>(acked));
      ++failures;
      continue;
    }
    const std::string phase = Phase(dir, acked + 1);
    ++phases[phase];
    std::printf("trial %d: %s, ACKed %lld, killed %s of %lld\n", t, how.c_str(),
                static_cast<long long>(acked), phase.c_str(), static_cast<long long>(acked + 1));
    if (Check(dir, acked, t % 2)) ++failures;
  }
  fs::remove_all(dir);
  std::printf("%d trials, %d failed; killed:", trials, failures);
  for (const auto& [p, n] : phases) std::printf(" %s %d;", p.c_str(), n);
  std::printf("\n");
  return failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 3 && std::string(argv[1]) == "saver") {
    return RunSaver(argv[2], argc > 3 ? std::atoll(argv[3]) : 0);
  }
  std::string dir, shim;
  int trials = 20;
  uint32_t seed = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--dir") dir = argv[i + 1];
    if (a == "--trials") trials = std::atoi(argv[i + 1]);
    if (a == "--seed") seed = static_cast<uint32_t>(std::atoll(argv[i + 1]));
    if (a == "--shim") shim = argv[i + 1];
  }
  if (dir.empty()) {
    std::fprintf(stderr, "usage: local_kill_trials --dir D [--trials N] [--seed S] [--shim P]\n");
    return 2;
  }
  return RunTrials(fs::canonical("/proc/self/exe").string(), dir, trials, seed, shim);
}
