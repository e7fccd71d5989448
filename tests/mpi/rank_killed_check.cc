// A rank of an MPI job killed (SIGKILL) in the middle of a save or a load:
// the surviving ranks fail with DeadlineExceeded within the Comm's deadline
// instead of waiting forever in the next collective, where the launcher lets
// them run on; and what Open MPI's mpirun does by default (it ends the whole
// job itself, at once).
//
// One binary, two roles:
//   rank_killed_check MPIEXEC [MPIRUN_FLAG...]       the driver (ctest runs
//       this): runs the worker under `MPIEXEC --enable-recovery -np 3` for a
//       save and for a load, and under plain `MPIEXEC -np 3` for a save, and
//       checks their output and times. Exit 0 if all held, 77 (skipped)
//       where MPIEXEC is not Open MPI's.
//   rank_killed_check --worker save|load DIR DEADLINE_MS   one rank.
// The victim is the last rank: its storage SIGKILLs the process at its first
// data write (save) or data read (load), after the first collectives and
// before the others'. Each survivor prints "SURVIVOR <rank> <code> <seconds>
// <message>" and leaves with _exit (MPI_Finalize would wait for the dead).
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "shardpoint/checkpoint.h"
#include "shardpoint/mpi_comm.h"
#include "tests/testing/run_command.h"

namespace shardpoint {
namespace {

// Whether `line` says "rank 2 (pid <digits> on this host) exited".
bool NamesKilledRank2(const std::string& line) {
  const std::string head = "rank 2 (pid ", tail = " on this host) exited";
  for (size_t at = line.find(head); at != std::string::npos; at = line.find(head, at + 1)) {
    size_t end = at + head.size();
    while (end < line.size() && line[end] >= '0' && line[end] <= '9') ++end;
    if (end > at + head.size() && line.compare(end, tail.size(), tail) == 0) return true;
  }
  return false;
}

// SIGKILLs this process at its first WriteAt or ReadAt of a file under
// "/data/" (a checkpoint's data files).
class KillingStorage : public StorageWrapper {
 public:
  using StorageWrapper::StorageWrapper;
  Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path,
                                                        const WriteFileOptions& o) override {
    SP_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> f, StorageWrapper::NewWritableFile(path, o));
    if (path.find("/data/") == std::string::npos) return f;
    return std::unique_ptr<WritableFile>(new Writable(std::move(f)));
  }
  Result<std::unique_ptr<ReadableFile>> NewReadableFile(const std::string& path) override {
    SP_ASSIGN_OR_RETURN(std::unique_ptr<ReadableFile> f, StorageWrapper::NewReadableFile(path));
    if (path.find("/data/") == std::string::npos) return f;
    return std::unique_ptr<ReadableFile>(new Readable(std::move(f)));
  }

 private:
  [[noreturn]] static void Die() {
    kill(getpid(), SIGKILL);
    for (;;) pause();
  }
  struct Writable : WritableFileWrapper {
    using WritableFileWrapper::WritableFileWrapper;
    Status WriteAt(uint64_t, const void*, size_t) override { Die(); }
  };
  struct Readable : ReadableFileWrapper {
    using ReadableFileWrapper::ReadableFileWrapper;
    Status ReadAt(uint64_t, size_t, void*) const override { Die(); }
  };
};

// Rank r holds rows [2r, 2r + 2) of "w" [2n, 4] F32.
struct Rows {
  std::vector<float> mem = std::vector<float>(8);
  State state;
  Rows(int r, int n) {
    for (size_t i = 0; i < mem.size(); ++i) mem[i] = static_cast<float>(r * 100 + i);
    LocalTensor t;
    t.data = mem.data();
    t.shape = {2, 4};
    t.segments = {Segment{"w", {2 * n, 4}, Box({2 * r, 0}, {2, 4}), {0, 0}}};
    state.tensors.push_back(t);
  }
};

[[noreturn]] void Leave(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  _exit(code);
}

int Worker(const std::string& mode, const std::string& dir, int deadline_ms) {
  MPI_Init(nullptr, nullptr);
  auto comm = MakeMpiComm(MPI_COMM_WORLD, std::chrono::milliseconds(deadline_ms));
  if (comm == nullptr) Leave(2);
  const int rank = comm->rank(), n = comm->size();
  const bool victim = rank == n - 1;
  KillingStorage killing(DefaultStorage());
  Storage* storage = victim ? static_cast<Storage*>(&killing) : DefaultStorage();
  Rows mine(rank, n);
  if (mode == "load") {
    Status saved = Save(mine.state, dir, *comm).status();
    if (!saved.ok()) {
      std::printf("SETUP-FAILED %d %s\n", rank, saved.ToString().c_str());
      Leave(3);
    }
  }
  const auto start = std::chrono::steady_clock::now();
  Status s;
  if (mode == "save") {
    SaveOptions o;
    o.storage = storage;
    s = Save(mine.state, dir, *comm, o).status();
  } else {
    LoadOptions o;
    o.storage = storage;
    s = Load(mine.state, dir, *comm, o).status();
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("SURVIVOR %d %s %.2f %s\n", rank, StatusCodeName(s.code()), seconds,
              s.message().c_str());
  Leave(0);
}

int failures = 0;

void Check(bool ok, const std::string& what, const std::string& out) {
  if (ok) return;
  ++failures;
  std::printf("FAIL: %s\n--- output ---\n%s\n---\n", what.c_str(), out.c_str());
}

// Runs the worker under mpirun; returns its output and the wall time.
testing::CommandResult RunJob(const std::string& launcher, const std::string& self,
                              const std::string& mode, const std::string& dir, int deadline_ms,
                              double* seconds) {
  const std::string cmd = launcher + " -np 3 " + self + " --worker " + mode + " " + dir + " " +
                          std::to_string(deadline_ms) + " 2>&1";
  const auto start = std::chrono::steady_clock::now();
  testing::CommandResult r = testing::RunCommand("timeout -s KILL 120 " + cmd);
  *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("%s: %.1f s, exit %d\n", cmd.c_str(), *seconds, r.exit_code);
  return r;
}

// Under --enable-recovery the two survivors report DeadlineExceeded naming
// the collective, after about the deadline and well within it plus slack.
void SurvivorsFailInTime(const std::string& mpiexec, const std::string& self,
                         const std::string& mode, const std::string& dir) {
  const int deadline_ms = 3000;
  double seconds = 0;
  testing::CommandResult r =
      RunJob(mpiexec + " --enable-recovery", self, mode, dir + "/" + mode, deadline_ms, &seconds);
  std::istringstream lines(r.out);
  std::string line;
  int survivors = 0;
  while (std::getline(lines, line)) {
    if (line.rfind("SURVIVOR ", 0) != 0) continue;
    std::istringstream f(line.substr(9));
    int rank = -1;
    std::string code;
    double waited = -1;
    f >> rank >> code >> waited;
    ++survivors;
    Check(rank == 0 || rank == 1, mode + ": a survivor is rank 0 or 1: " + line, r.out);
    Check(code == "DeadlineExceeded", mode + ": survivor's error is DeadlineExceeded: " + line,
          r.out);
    Check(line.find("did not complete within its deadline of 3000 ms") != std::string::npos,
          mode + ": the error names the collective and the deadline: " + line, r.out);
    Check(NamesKilledRank2(line), mode + ": the error names the killed rank: " + line, r.out);
    Check(waited >= 2.5 && waited < 3.0 + 20.0,
          mode + ": survivor failed after about the deadline: " + line, r.out);
  }
  Check(survivors == 2, mode + ": both survivors reported", r.out);
  Check(seconds < 60, mode + ": the job ended within a minute", r.out);
}

int Driver(int argc, char** argv) {
  std::string mpiexec = argv[1];
  for (int i = 2; i < argc; ++i) mpiexec += std::string(" ") + argv[i];
  testing::CommandResult version = testing::RunCommand(std::string(argv[1]) + " --version 2>&1");
  if (version.out.find("Open MPI") == std::string::npos &&
      version.out.find("OpenRTE") == std::string::npos) {
    std::printf("SKIP: %s is not Open MPI's mpirun (--enable-recovery is Open MPI's)\n", argv[1]);
    return 77;
  }
  char self[4096];
  const ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
  if (len <= 0) return 2;
  self[len] = '\0';
  char tmpl[] = "/tmp/shardpoint_rank_killed_XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return 2;
  const std::string dir = tmpl;

  SurvivorsFailInTime(mpiexec, self, "save", dir);
  SurvivorsFailInTime(mpiexec, self, "load", dir);

  // Plain mpirun: Open MPI ends the whole job as soon as a rank dies, before
  // any survivor reaches its deadline (so it neither hangs nor reports).
  double seconds = 0;
  testing::CommandResult r = RunJob(mpiexec, self, "save", dir + "/plain", 30000, &seconds);
  Check(r.exit_code != 0, "plain mpirun: the job fails", r.out);
  Check(r.out.find("SURVIVOR") == std::string::npos, "plain mpirun: no rank survives", r.out);
  Check(seconds < 25, "plain mpirun: ended before the 30 s deadline", r.out);

  (void)DefaultStorage()->RemoveAll(dir);
  std::printf("%s\n", failures == 0 ? "PASS" : "FAILED");
  return failures == 0 ? 0 : 1;
}

}  // namespace
}  // namespace shardpoint

int main(int argc, char** argv) {
  if (argc == 5 && std::string(argv[1]) == "--worker") {
    return shardpoint::Worker(argv[2], argv[3], std::atoi(argv[4]));
  }
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MPIEXEC [FLAG...] | --worker save|load DIR DEADLINE_MS\n",
                 argv[0]);
    return 2;
  }
  return shardpoint::Driver(argc, argv);
}
