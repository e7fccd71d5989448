// Crash trials of the conversions (docs/reliability.md): `shardpoint
// export-hf`, `convert` (HF -> shardpoint) and `convert --to dcp`, killed
// with SIGKILL or SIGTERM (what a scheduler sends on preemption) at a random
// time, writing over an existing output of other weights or into a new
// directory. After every kill the output must be absent, or the previous
// output whole, or the new one whole, as `shardpoint diff` against the
// sources tells; never readable with other content. The same command then
// runs to completion over whatever the kill left.
//
//   export_crash_trials --cli P --dir D [--trials N] [--seed S]
//
// Prints one line per trial and a summary; exit 0 iff every check held.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "shardpoint/checkpoint.h"
#include "shardpoint/comm.h"

namespace sp = shardpoint;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

int failures = 0;

void Fail(const std::string& what) {
  ++failures;
  std::printf("FAIL: %s\n", what.c_str());
  std::fflush(stdout);
}

// Runs `args` (argv[0] first), sending `sig` after `after_s` seconds when
// after_s >= 0. Returns the waitpid status; output goes to /dev/null.
int Run(const std::vector<std::string>& args, double after_s = -1, int sig = SIGKILL) {
  std::fflush(stdout);  // or the child's freopen writes our buffered lines again
  const Clock::time_point start = Clock::now();
  const pid_t pid = fork();
  if (pid == 0) {
    if (!freopen("/dev/null", "w", stdout) || !freopen("/dev/null", "w", stderr)) _exit(126);
    std::vector<char*> a;
    for (const std::string& s : args) a.push_back(const_cast<char*>(s.c_str()));
    a.push_back(nullptr);
    execv(a[0], a.data());
    _exit(127);
  }
  int status = 0;
  bool sent = after_s < 0;
  for (;;) {
    if (waitpid(pid, &status, WNOHANG) == pid) return status;
    const double now = std::chrono::duration<double>(Clock::now() - start).count();
    if (!sent && now >= after_s) {
      kill(pid, sig);
      sent = true;
    }
    if (now > 120) {
      Fail(args[1] + std::string(" still running after 120 s"));
      kill(pid, SIGKILL);
    }
    usleep(200);
  }
}

int Exit(int status) { return WIFEXITED(status) ? WEXITSTATUS(status) : -1; }

// A checkpoint of 16 tensors [256, 256] F32 (4 MiB), every value from `seed`.
void SaveCheckpoint(const std::string& dir, uint32_t seed) {
  std::vector<std::vector<float>> mem(16, std::vector<float>(256 * 256));
  std::mt19937 rng(seed);
  sp::State state;
  for (size_t i = 0; i < mem.size(); ++i) {
    for (float& v : mem[i]) v = static_cast<float>(rng() % 100000) / 7.0f;
    sp::LocalTensor t;
    t.data = mem[i].data();
    t.shape = {256, 256};
    const std::string key = "layers." + std::to_string(i) + ".w";
    t.segments = {sp::Segment{key, {256, 256}, sp::Box::Whole({256, 256}), {0, 0}}};
    state.tensors.push_back(t);
  }
  std::unique_ptr<sp::Comm> comm = sp::MakeSingleComm();
  sp::Result<sp::SaveStats> st = sp::Save(state, dir, *comm);
  if (!st.ok()) {
    std::fprintf(stderr, "save %s: %s\n", dir.c_str(), st.status().ToString().c_str());
    std::exit(2);
  }
}

struct Kind {
  const char* name;
  std::vector<std::string> flags;  // after "SRC DST"
  bool from_hf;                    // the sources are the HF exports
};

}  // namespace

int main(int argc, char** argv) {
  std::string cli, dir;
  int trials = 20;
  uint32_t seed = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--cli") cli = argv[i + 1];
    if (a == "--dir") dir = argv[i + 1];
    if (a == "--trials") trials = std::atoi(argv[i + 1]);
    if (a == "--seed") seed = static_cast<uint32_t>(std::atoi(argv[i + 1]));
  }
  if (cli.empty() || dir.empty()) {
    std::fprintf(stderr, "usage: export_crash_trials --cli P --dir D [--trials N] [--seed S]\n");
    return 2;
  }
  fs::remove_all(dir);
  fs::create_directories(dir);
  // Two sources of other weights, each as a checkpoint and an HF model.
  const std::string ck[2] = {dir + "/ckpt_a", dir + "/ckpt_b"};
  const std::string hf[2] = {dir + "/hf_a", dir + "/hf_b"};
  for (int i = 0; i < 2; ++i) {
    SaveCheckpoint(ck[i], seed * 2 + static_cast<uint32_t>(i));
    if (Exit(Run({cli, "export-hf", ck[i], hf[i], "-q"})) != 0) Fail("export " + ck[i]);
  }
  const std::vector<Kind> kinds = {
      {"export-hf", {"--max-shard-size", "1MB"}, false},
      {"convert", {}, true},
      {"convert", {"--to", "dcp"}, false},
  };
  std::mt19937 rng(seed);
  // How long each kind runs here, so that kills land inside it.
  std::vector<double> took;
  for (const Kind& k : kinds) {
    const std::string out = dir + "/calibrate";
    std::vector<std::string> args = {cli, k.name, k.from_hf ? hf[0] : ck[0], out, "-q"};
    args.insert(args.end(), k.flags.begin(), k.flags.end());
    const Clock::time_point t0 = Clock::now();
    if (Exit(Run(args)) != 0) Fail(std::string("calibration run of ") + k.name);
    took.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    fs::remove_all(out);
  }
  int outcomes[3] = {0, 0, 0};  // absent, previous, new
  for (int t = 0; t < trials; ++t) {
    const size_t ki = rng() % kinds.size();
    const Kind& k = kinds[ki];
    const bool over = rng() % 2 == 0;  // over an existing output of the other weights
    const int sig = rng() % 2 == 0 ? SIGKILL : SIGTERM;
    const double at = std::uniform_real_distribution<double>(0, took[ki] * 1.1)(rng);
    const std::string out = dir + "/out" + std::to_string(t);
    auto command = [&](int src) {
      std::vector<std::string> a = {cli, k.name, k.from_hf ? hf[src] : ck[src],
                                    out, "-q",   "--overwrite"};
      a.insert(a.end(), k.flags.begin(), k.flags.end());
      return a;
    };
    if (over && Exit(Run(command(0))) != 0) Fail("trial " + std::to_string(t) + ": first run");
    const int status = Run(command(1), at, sig);
    // What is there now: equal to source 1 (new), to source 0 (previous), or absent.
    int found = -1;
    if (!fs::exists(out)) {
      found = 0;
    } else if (Exit(Run({cli, "diff", ck[1], out, "-q"})) == 0) {
      found = 2;
    } else if (over && Exit(Run({cli, "diff", ck[0], out, "-q"})) == 0) {
      found = 1;
    }
    const bool ok = found == 2 || (found == 1 && over) || (found == 0 && !over);
    std::printf("trial %2d: %-9s %-8s %s at %.3f s of %.3f: %s, output %s\n", t, k.name,
                k.flags.empty() ? "" : k.flags[0].c_str(), sig == SIGKILL ? "SIGKILL" : "SIGTERM",
                at, took[ki], Exit(status) == 0 ? "finished" : "killed",
                found == 0   ? "absent"
                : found == 1 ? "the previous one, whole"
                : found == 2 ? "the new one, whole"
                             : "WRONG");
    if (!ok) Fail("trial " + std::to_string(t) + ": the output is neither absent nor whole");
    if (found >= 0) ++outcomes[found];
    // Whatever the kill left, the same command then completes.
    if (Exit(Run(command(1))) != 0 || Exit(Run({cli, "diff", ck[1], out, "-q"})) != 0) {
      Fail("trial " + std::to_string(t) + ": the rerun did not write the new output");
    }
    for (const char* left : {".partial", ".old"}) {
      if (fs::exists(out + left)) Fail("trial " + std::to_string(t) + ": " + out + left + " left");
    }
    fs::remove_all(out);
  }
  std::printf("%d trials: output absent %d, previous %d, new %d; %d failure(s)\n", trials,
              outcomes[0], outcomes[1], outcomes[2], failures);
  if (failures == 0) fs::remove_all(dir);
  return failures == 0 ? 0 : 1;
}
