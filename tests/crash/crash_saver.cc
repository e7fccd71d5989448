// The saving job the crash trials kill (tests/crash/crash_trials.cc). Uses the
// public API only, as a training job would:
//
//   crash_saver <root> [--iters N] [--keep K] [--kb KB] [--mode sync|async|mixed]
//               [--mpi] [--pid-dir D] [--no-lock] [--shard-manifest]
//
// Opens a CheckpointManager on <root> (taking over the lock of a killed
// predecessor), resumes from the newest complete checkpoint and checks that
// it holds exactly that iteration's state, then saves the next N iterations
// (Save, SaveAsync with the buffers overwritten while the save runs, or
// alternating). After each save that returned OK, rank 0 writes "ACK <it>"
// to stdout with one write(2): an acknowledged save, which no later crash may
// lose. A rank that fails on its own also writes "FAILED <code> <why>".
// Exit codes: 0 done, 3 Open failed, 4 resumed state wrong, 5 a save
// failed, 2 usage. --no-lock: no lock (object stores: a killed job's lease
// would block the next run for a whole lease). --shard-manifest: every
// manifest is sharded however small (the keys' owners write their shards
// files before rank 0 writes the index: src/checkpoint/owner_commit.h).
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "shardpoint/async_save.h"
#include "shardpoint/manager.h"
#include "shardpoint/mpi_comm.h"
#include "src/checkpoint/manifest_io.h"
#include "tests/crash/crash_state.h"

namespace sp = shardpoint;

namespace {

void Say(const std::string& line) {
  std::string l = line + "\n";
  ssize_t n = ::write(1, l.data(), l.size());
  (void)n;
}

[[noreturn]] void Fail(int code, const std::string& what) {
  std::fprintf(stderr, "crash_saver: %s\n", what.c_str());
  std::fflush(stderr);
  Say("FAILED " + std::to_string(code) + " " + what);  // the driver looks for it
  std::_Exit(code);  // no destructors: a failed job is as good as a killed one
}

struct Args {
  std::string root, pid_dir, mode = "mixed";
  int iters = 4, keep = 2;
  int64_t kb = 256;
  bool mpi = false, lock = true, shard_manifest = false;
};

Args Parse(int argc, char** argv) {
  Args a;
  if (argc < 2) Fail(2, "usage: crash_saver <root> [--iters N] [--keep K] [--kb KB] [--mode M]");
  a.root = argv[1];
  for (int i = 2; i < argc; ++i) {
    std::string f = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) Fail(2, "missing value after " + f);
      return argv[++i];
    };
    if (f == "--iters") {
      a.iters = std::atoi(next().c_str());
    } else if (f == "--keep") {
      a.keep = std::atoi(next().c_str());
    } else if (f == "--kb") {
      a.kb = std::atoll(next().c_str());
    } else if (f == "--mode") {
      a.mode = next();
    } else if (f == "--pid-dir") {
      a.pid_dir = next();
    } else if (f == "--mpi") {
      a.mpi = true;
    } else if (f == "--no-lock") {
      a.lock = false;
    } else if (f == "--shard-manifest") {
      a.shard_manifest = true;
    } else {
      Fail(2, "unknown flag " + f);
    }
  }
  return a;
}

int Run(const Args& a, sp::Comm& comm) {
  const int rank = comm.rank(), world = comm.size();
  if (!a.pid_dir.empty()) {
    std::string p = a.pid_dir + "/rank" + std::to_string(rank);
    FILE* f = std::fopen(p.c_str(), "w");
    if (f) std::fprintf(f, "%d\n", static_cast<int>(::getpid())), std::fclose(f);
  }
  sp::ManagerOptions mo;
  mo.keep_last = a.keep;
  mo.lock = a.lock;
  sp::Result<std::unique_ptr<sp::CheckpointManager>> m =
      sp::CheckpointManager::Open(a.root, comm, mo);
  if (!m.ok()) Fail(3, "Open: " + m.status().ToString());
  sp::CheckpointManager& mgr = **m;

  sp::crash::CrashState cs;
  sp::crash::Build(&cs, a.kb, rank, world);
  cs.state.common = "";
  sp::Result<int64_t> resumed = mgr.Resume(cs.state, comm);
  int64_t it = 0;
  if (resumed.ok()) {
    it = *resumed;
    std::string bad = sp::crash::Mismatch(cs, it, a.kb, rank, world);
    if (!bad.empty()) Fail(4, "resumed iteration " + std::to_string(it) + ": " + bad);
    if (rank == 0) Say("RESUMED " + std::to_string(it));
  } else if (resumed.status().code() != sp::StatusCode::kNotFound) {
    Fail(4, "Resume: " + resumed.status().ToString());
  }

  sp::AsyncSaver saver;
  for (int n = 0; n < a.iters; ++n) {
    ++it;
    sp::crash::Fill(&cs, it, a.kb, rank, world);
    const bool async = a.mode == "async" || (a.mode == "mixed" && it % 2 == 1);
    sp::Status s;
    if (async) {
      sp::SaveHandle h = mgr.SaveAsync(saver, cs.state, it, comm);
      // Training goes on: the next step overwrites the buffers at once.
      std::memset(cs.w.data(), 0xAB, cs.w.size());
      std::memset(cs.b.data(), 0xCD, cs.b.size());
      for (sp::Object& o : cs.state.objects) o.bytes.assign(o.bytes.size(), 'x');
      s = h.Wait().status();
    } else {
      s = mgr.Save(cs.state, it, comm).status();
    }
    if (!s.ok()) Fail(5, "save of iteration " + std::to_string(it) + ": " + s.ToString());
    if (rank == 0) Say("ACK " + std::to_string(it));
  }
  if (rank == 0) Say("DONE");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a = Parse(argc, argv);
  if (a.shard_manifest) sp::internal_checkpoint::SetManifestSharding({0, 4096, 4096});
  if (a.mpi) {
#ifdef SHARDPOINT_HAVE_MPI
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    int rc;
    {
      std::unique_ptr<sp::Comm> comm = sp::MakeMpiComm(MPI_COMM_WORLD);
      if (!comm) Fail(2, "MakeMpiComm failed");
      rc = Run(a, *comm);
    }
    MPI_Finalize();
    return rc;
#else
    Fail(2, "--mpi: built without MPI");
#endif
  }
  std::unique_ptr<sp::Comm> comm = sp::MakeSingleComm();
  return Run(a, *comm);
}
