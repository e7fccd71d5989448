// local_tier_bench: the local tier against memcpy and against the
// persistent checkpoint, in one run.
//
//   local_tier_bench [--dir DIR] [--gib N] [--ranks R] [--reps K] [--io-threads T]
//                    [--local-root L] [--round-mib M] [--drop-caches] [--keep]
//                    [--recover-only]
//
// R ranks (threads, R even) are R/2 "nodes" of 2, each with its own local
// root L/node<i> (default /dev/shm/shardpoint_bench); they hold a
// transformer-like model with Adam state laid out as TP=2, DP=R/2 with the
// distributed optimizer (N GiB of tensors in all); replication and
// recovery move M MiB per rank per round (default 1, LocalTierOptions'
// default: the round buffers are faulted in once and reused). Per rep, slowest rank:
//   memcpy       each rank copies its tensors into memory it touched before
//   local save   LocalSave: the local write (Save through the node storage)
//                and the replication (r = 1), apart
//   recycled     LocalSave as the TieredManager runs it (keep_local 2): from
//                the third rep on, written over the tmpfs pages of the
//                checkpoint retention removes next (src/local/recycle.h),
//                under L_recycle; CPU seconds and write/replicate wall
//                beside the fresh LocalSave of the same rep
//   local write  the local write alone, as LocalSave's step 1 does it (Save
//                to the node's root, buffered, no preallocation, not
//                fsynced): wall, CPU seconds and minor page faults
//   async stall  how long LocalSaveAsync blocked (a Reserve()d AsyncSaver),
//                apart: the staging copy (SaveHandle::stall_seconds) and
//                the rest (step 0: the topology, clearing the node's
//                directory, their agreements),
//                and the time until its Wait() returned
//   persistent   Save to DIR (O_DIRECT where possible, fsynced)
//   recover      node 1's root wiped, LocalLoad into TP=2, DP=R/2 again
//   load         Load of DIR, its data files evicted from the page cache
//                first (POSIX_FADV_DONTNEED), so it reads the disk; with
//                --drop-caches the whole page cache is dropped first too
//                (sync, then 3 > /proc/sys/vm/drop_caches: a restart's
//                cold cache, the manifest and the binary's pages included)
//   other        recover and load again, into TP=1, DP=R
//   step         every rank runs a fixed "training step" (arithmetic over
//                64 KiB) in a loop, alone and then while a LocalSaveAsync
//                (the local write and the replication) runs behind it: the
//                slowdown replication causes a running loop (rank 0)
// --recover-only: per rep only the local save, the persistent save, recover,
// load and other (and their lines): for alternating binaries.
// CPU seconds (user + system, all ranks) of the save, recovery and load,
// and the minor page faults of the recovery and the load (fresh memory
// touched: each costs a trap to the hypervisor in a VM).
// Prints the medians over K reps and the ratios the issue asks for.
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench_common.h"
#include "shardpoint/checkpoint.h"
#include "shardpoint/local_tier.h"
#include "src/local/local_save.h"
#include "tests/testing/transformer.h"

namespace fs = std::filesystem;
namespace sp = shardpoint;
using sp::testing::ModelConfig;
using sp::testing::ParallelConfig;

namespace {

constexpr char kProgram[] = "local_tier_bench";

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

ModelConfig ScaleModel(uint64_t target) {
  ModelConfig m;
  m.layers = 8;
  for (int64_t h = 64;; h += 64) {
    m.hidden = h, m.ffn = 4 * h, m.vocab = 16 * h;
    uint64_t total = 0;
    for (const auto& s : sp::testing::ModelTensors(m)) {
      total += static_cast<uint64_t>(sp::Box::Whole(s.shape).num_elements()) * DTypeSize(s.dtype);
    }
    if (total >= target) return m;
  }
}

// --drop-caches: Evict also drops the whole page cache, as a restart of
// the machine meets it (`echo 3 > /proc/sys/vm/drop_caches`, root only).
bool g_drop_caches = false;
bool g_recover_only = false;

void Evict(const std::string& dir) {
  if (g_drop_caches) {
    ::sync();
    FILE* f = std::fopen("/proc/sys/vm/drop_caches", "w");
    if (f == nullptr || std::fputs("3\n", f) < 0 || std::fclose(f) != 0) {
      sp::bench::Die(kProgram, "--drop-caches: cannot write /proc/sys/vm/drop_caches");
    }
  }
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    const int fd = ::open(e.path().c_str(), O_RDONLY);
    if (fd < 0) continue;
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

// One "training step": a fixed amount of arithmetic over 64 KiB (a few
// milliseconds here), the same on every call.
double Step(std::vector<float>& buf) {
  float acc = 0;
  for (int pass = 0; pass < 64; ++pass) {
    for (float& v : buf) {
      v = v * 0.999f + 0.001f;
      acc += v;
    }
  }
  return acc;
}

// Seconds per step of rank `comm`'s loop: alone (steps_alone steps), then
// while a LocalSaveAsync of `state` runs in the background (until its Wait
// would return at once). Returns {alone, during}.
std::pair<double, double> StepTimes(sp::Comm& comm, sp::AsyncSaver& saver, const sp::State& state,
                                    int64_t it, const sp::LocalTierOptions& o) {
  std::vector<float> buf(16 << 10, 1.0f);
  volatile double sink = 0;
  const int kAlone = 200;
  auto t = Clock::now();
  for (int i = 0; i < kAlone; ++i) sink = sink + Step(buf);
  const double alone = Since(t) / kAlone;
  sp::Result<sp::SaveHandle> h = sp::LocalSaveAsync(saver, state, it, comm, o);
  if (!h.ok()) sp::bench::Die(kProgram, h.status().ToString());
  t = Clock::now();
  int steps = 0;
  while (!h->Done()) {
    sink = sink + Step(buf);
    ++steps;
  }
  const double during = steps > 0 ? Since(t) / steps : 0;
  if (!h->Wait().ok()) sp::bench::Die(kProgram, "async local save failed");
  return {alone, during};
}

// CPU seconds (user + system) of the process so far: every rank's thread.
double Cpu() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  auto sec = [](const timeval& t) { return t.tv_sec + t.tv_usec * 1e-6; };
  return sec(u.ru_utime) + sec(u.ru_stime);
}

// Minor page faults of the process so far (fresh memory touched): all ranks.
double Faults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_minflt);
}

// Runs fn on every rank; returns the slowest rank's seconds (fn's own figure).
double Slowest(int ranks, const std::function<sp::Result<double>(sp::Comm&)>& fn) {
  std::vector<double> secs(ranks, 0);
  for (const sp::Status& s : sp::RunThreadRanks(ranks, [&](sp::Comm& comm) -> sp::Status {
         SP_ASSIGN_OR_RETURN(secs[comm.rank()], fn(comm));
         return sp::OkStatus();
       })) {
    if (!s.ok()) sp::bench::Die(kProgram, s.ToString());
  }
  return *std::max_element(secs.begin(), secs.end());
}

}  // namespace

int main(int argc, char** argv) {
  std::string local_root = "/dev/shm/shardpoint_bench";
  uint64_t round_mib = 1;
  sp::bench::Flags f = sp::bench::ParseFlags(
      kProgram, {"/tmp/shardpoint_local_bench", 0.5, 4, 3, 2, false}, argc, argv,
      [&](const std::string& flag, const std::function<std::string()>& value) {
        if (flag == "--drop-caches") {
          g_drop_caches = true;
          return true;
        }
        if (flag == "--recover-only") {
          g_recover_only = true;
          return true;
        }
        if (flag == "--round-mib") {
          round_mib = std::stoull(value());
          return true;
        }
        if (flag != "--local-root") return false;
        local_root = value();
        return true;
      },
      " [--local-root L] [--round-mib M] [--drop-caches] [--recover-only]");
  if (f.ranks % 2 != 0) sp::bench::Die(kProgram, "--ranks must be even (nodes of 2)");
  const ParallelConfig layout{2, 1, f.ranks / 2, true};
  const ParallelConfig other{1, 1, f.ranks, true};  // the other layout: TP=1, DP=R
  const ModelConfig model = ScaleModel(static_cast<uint64_t>(f.gib * (1ull << 30)));
  std::vector<sp::testing::RankState> states(f.ranks), loaded(f.ranks), loaded_other(f.ranks);
  uint64_t total = 0;
  for (int r = 0; r < f.ranks; ++r) {
    auto rs = sp::testing::BuildRankState(model, layout, r);
    auto ls = sp::testing::BuildRankState(model, layout, r);
    auto os = sp::testing::BuildRankState(model, other, r);
    if (!rs.ok() || !ls.ok() || !os.ok()) sp::bench::Die(kProgram, rs.status().ToString());
    loaded_other[r] = std::move(*os);
    states[r] = std::move(*rs);
    loaded[r] = std::move(*ls);
    for (const sp::LocalTensor& t : states[r].state.tensors) {
      sp::bench::Fill(t);
      total += sp::bench::Bytes(t);
    }
  }
  std::printf("%d ranks as %d nodes of 2, %.3f GiB of tensors (hidden %lld), local root %s\n",
              f.ranks, f.ranks / 2, total / double(1ull << 30),
              static_cast<long long>(model.hidden), local_root.c_str());
  auto options = [&](int rank) {
    sp::LocalTierOptions o;
    o.local_root = local_root + "/node" + std::to_string(rank / 2);
    o.node_id = "node" + std::to_string(rank / 2);
    o.io_threads = f.threads;
    o.round_bytes = round_mib << 20;
    return o;
  };
  std::vector<std::unique_ptr<sp::AsyncSaver>> savers(f.ranks);
  std::vector<std::vector<char>> copies(f.ranks);
  for (int r = 0; r < f.ranks; ++r) {
    savers[r] = std::make_unique<sp::AsyncSaver>();
    if (!savers[r]->Reserve(states[r].state).ok()) sp::bench::Die(kProgram, "Reserve failed");
    copies[r].assign(states[r].bytes + 1, 1);
  }
  std::vector<double> memcpy_s, save_s, write_s, repl_s, stall_s, async_s, pers_s, rec_s, load_s;
  std::vector<double> staging_s, wo_s, wo_cpu, wo_flt, memcpy_cpu;
  std::vector<double> save_cpu, rec_cpu, load_cpu, step_alone, step_during, rec_flt, load_flt;
  std::vector<double> orec_s, oload_s, orec_cpu, oload_cpu;
  std::vector<double> rsave_s, rsave_cpu, rwrite_s, rrepl_s, fresh_cpu;  // reps >= 2
  uint64_t peer = 0, persistent = 0;
  for (int rep = 0; rep < f.reps; ++rep) {
    const int64_t it = rep;
    const double cpu0 = Cpu();
    if (!g_recover_only) {
      memcpy_s.push_back(Slowest(f.ranks, [&](sp::Comm& comm) -> sp::Result<double> {
        const auto t = Clock::now();
        size_t at = 0;
        for (const sp::LocalTensor& lt : states[comm.rank()].state.tensors) {
          std::memcpy(copies[comm.rank()].data() + at, lt.data, sp::bench::Bytes(lt));
          at += sp::bench::Bytes(lt);
        }
        return Since(t);
      }));
      memcpy_cpu.push_back(Cpu() - cpu0);
    }
    double w = 0, rp = 0;
    double cpu = Cpu();
    save_s.push_back(Slowest(f.ranks, [&](sp::Comm& comm) -> sp::Result<double> {
      const auto t = Clock::now();
      SP_ASSIGN_OR_RETURN(sp::LocalSaveStats st, sp::LocalSave(states[comm.rank()].state, 2 * it,
                                                               comm, options(comm.rank())));
      if (comm.rank() == 0) w = st.save.seconds, rp = st.replicate_seconds;
      return Since(t);
    }));
    save_cpu.push_back(Cpu() - cpu);
    write_s.push_back(w);
    repl_s.push_back(rp);
    if (!g_recover_only) {  // the saves' other figures
      // The manager's local save: over the pages of iteration rep - 2.
      cpu = Cpu();
      const double rs = Slowest(f.ranks, [&](sp::Comm& comm) -> sp::Result<double> {
        sp::LocalTierOptions o = options(comm.rank());
        o.local_root = local_root + "_recycle/node" + std::to_string(comm.rank() / 2);
        const sp::internal_local::RecyclePolicy keep2{2, {}};
        const auto t = Clock::now();
        SP_ASSIGN_OR_RETURN(
            sp::LocalSaveStats st,
            sp::internal_local::LocalSaveWith(states[comm.rank()].state, it, comm, o, &keep2));
        if (comm.rank() == 0) w = st.save.seconds, rp = st.replicate_seconds;
        return Since(t);
      });
      if (rep >= 2) {
        rsave_s.push_back(rs);
        rsave_cpu.push_back(Cpu() - cpu);
        rwrite_s.push_back(w);
        rrepl_s.push_back(rp);
        fresh_cpu.push_back(save_cpu.back());
      }
      // The local write alone (step 1 of LocalSave, without its collectives).
      cpu = Cpu();
      double flt0 = Faults();
      wo_s.push_back(Slowest(f.ranks, [&](sp::Comm& comm) -> sp::Result<double> {
        sp::SaveOptions so;
        so.io_threads = f.threads;
        so.direct_io = false;
        so.preallocate = false;
        const auto t = Clock::now();
        SP_RETURN_IF_ERROR(sp::Save(states[comm.rank()].state,
                                    local_root + "/write_only_" + std::to_string(rep), comm, so)
                               .status());
        return Since(t);
      }));
      wo_cpu.push_back(Cpu() - cpu);
      wo_flt.push_back(Faults() - flt0);
      std::filesystem::remove_all(local_root + "/write_only_" + std::to_string(rep));
      double stall = 0, staging = 0;
      async_s.push_back(Slowest(f.ranks, [&](sp::Comm& comm) -> sp::Result<double> {
        const auto t = Clock::now();
        SP_ASSIGN_OR_RETURN(sp::SaveHandle h,
                            sp::LocalSaveAsync(*savers[comm.rank()], states[comm.rank()].state,
                                               2 * it + 1, comm, options(comm.rank())));
        if (comm.rank() == 0) stall = Since(t), staging = h.stall_seconds();
        SP_RETURN_IF_ERROR(h.Wait().status());
        return Since(t);
      }));
      stall_s.push_back(stall);
      staging_s.push_back(staging);
    }
    // The local checkpoint recovered: the async save's (the sync one's
    // with --recover-only).
    const int64_t rec_it = g_recover_only ? 2 * it : 2 * it + 1;
    const std::string dir = f.dir + "/iter_" + std::to_string(it);
    fs::remove_all(dir);
    pers_s.push_back(Slowest(f.ranks, [&](sp::Comm& comm) -> sp::Result<double> {
      const auto t = Clock::now();
      SP_RETURN_IF_ERROR(sp::Save(states[comm.rank()].state, dir, comm).status());
      return Since(t);
    }));
    fs::remove_all(local_root + "/node1");
    cpu = Cpu();
    double flt = Faults();
    rec_s.push_back(Slowest(f.ranks, [&](sp::Comm& comm) -> sp::Result<double> {
      const auto t = Clock::now();
      SP_ASSIGN_OR_RETURN(sp::LoadResult r, sp::LocalLoad(loaded[comm.rank()].state, rec_it, comm,
                                                          options(comm.rank()), dir));
      if (comm.rank() == 2) peer = r.bytes_peer, persistent = r.bytes_persistent;
      return Since(t);
    }));
    rec_cpu.push_back(Cpu() - cpu);
    rec_flt.push_back(Faults() - flt);
    // A training loop on every rank while a local save (write + replication)
    // runs behind it: seconds per step, rank 0.
    if (!g_recover_only)
      Slowest(f.ranks, [&](sp::Comm& comm) -> sp::Result<double> {
        auto [a, d] = StepTimes(comm, *savers[comm.rank()], states[comm.rank()].state, 1000 + it,
                                options(comm.rank()));
        if (comm.rank() == 0) step_alone.push_back(a), step_during.push_back(d);
        return 0.0;
      });
    Evict(dir);
    cpu = Cpu();
    flt = Faults();
    load_s.push_back(Slowest(f.ranks, [&](sp::Comm& comm) -> sp::Result<double> {
      const auto t = Clock::now();
      sp::LoadOptions lo;
      lo.io_threads = f.threads;
      SP_RETURN_IF_ERROR(sp::Load(loaded[comm.rank()].state, dir, comm, lo).status());
      return Since(t);
    }));
    load_cpu.push_back(Cpu() - cpu);
    load_flt.push_back(Faults() - flt);
    // The same recovery and load into the other layout (TP=1, DP=R).
    cpu = Cpu();
    orec_s.push_back(Slowest(f.ranks, [&](sp::Comm& comm) -> sp::Result<double> {
      const auto t = Clock::now();
      sp::LoadOptions lo;
      lo.allow_unexpected_keys = true;
      SP_RETURN_IF_ERROR(sp::LocalLoad(loaded_other[comm.rank()].state, rec_it, comm,
                                       options(comm.rank()), dir, lo)
                             .status());
      return Since(t);
    }));
    orec_cpu.push_back(Cpu() - cpu);
    Evict(dir);
    cpu = Cpu();
    oload_s.push_back(Slowest(f.ranks, [&](sp::Comm& comm) -> sp::Result<double> {
      const auto t = Clock::now();
      sp::LoadOptions lo;
      lo.io_threads = f.threads;
      lo.allow_unexpected_keys = true;
      SP_RETURN_IF_ERROR(sp::Load(loaded_other[comm.rank()].state, dir, comm, lo).status());
      return Since(t);
    }));
    oload_cpu.push_back(Cpu() - cpu);
    fs::remove_all(local_root);
    if (!f.keep) fs::remove_all(dir);
  }
  fs::remove_all(local_root + "_recycle");
  using sp::bench::Median;
  const double gib = total / double(1ull << 30);
  // The recovery's lines, the same with and without --recover-only.
  auto print_recovery = [&](const std::string& save_cpu_text) {
    std::printf(
        "recover node 1 (LocalLoad)  %8.3f s  (rank 2: %llu bytes from peers, %llu persistent)\n",
        Median(rec_s), static_cast<unsigned long long>(peer),
        static_cast<unsigned long long>(persistent));
    std::printf("load persistent (cold)      %8.3f s\n", Median(load_s));
    std::printf("CPU seconds (all ranks): %srecover %.3f, load persistent %.3f\n",
                save_cpu_text.c_str(), Median(rec_cpu), Median(load_cpu));
    std::printf(
        "other layout (TP=1, DP=%d): recover %.3f s (%.3f CPU s), load persistent (cold) "
        "%.3f s (%.3f CPU s): recover speedup %.2fx\n",
        f.ranks, Median(orec_s), Median(orec_cpu), Median(oload_s), Median(oload_cpu),
        Median(oload_s) / Median(orec_s));
    std::printf("minor page faults (all ranks): recover %.0f, load persistent %.0f\n",
                Median(rec_flt), Median(load_flt));
  };
  if (g_recover_only) {
    print_recovery("");
    std::printf("recover speedup %.2fx\n", Median(load_s) / Median(rec_s));
    return 0;
  }
  std::printf("memcpy of the state         %8.3f s  %6.2f GiB/s (%.3f CPU s)\n", Median(memcpy_s),
              gib / Median(memcpy_s), Median(memcpy_cpu));
  std::printf("local save (sync)           %8.3f s  %6.2f GiB/s (write %.3f s, replicate %.3f s)\n",
              Median(save_s), gib / Median(save_s), Median(write_s), Median(repl_s));
  if (!rsave_s.empty()) {
    std::printf(
        "local save, recycled pages  %8.3f s  (write %.3f s, replicate %.3f s; %.3f CPU s, the "
        "fresh local save of the same reps %.3f CPU s; %zu reps)\n",
        Median(rsave_s), Median(rwrite_s), Median(rrepl_s), Median(rsave_cpu), Median(fresh_cpu),
        rsave_s.size());
  }
  std::printf(
      "local write alone           %8.3f s  (%.3f CPU s, %.0f minor faults; all ranks): "
      "CPU / memcpy's %.2fx\n",
      Median(wo_s), Median(wo_cpu), Median(wo_flt), Median(wo_cpu) / Median(memcpy_cpu));
  std::vector<double> rest_s;  // the stall beyond the staging copy, per rep
  for (size_t i = 0; i < stall_s.size(); ++i) rest_s.push_back(stall_s[i] - staging_s[i]);
  std::printf(
      "local save async: stall     %8.3f s  (staging copy %.3f s, step 0 %.3f s; until Wait: "
      "%.3f s)\n",
      Median(stall_s), Median(staging_s), Median(rest_s), Median(async_s));
  std::printf("persistent save             %8.3f s\n", Median(pers_s));
  char save_cpu_text[64];
  std::snprintf(save_cpu_text, sizeof save_cpu_text, "local save %.3f, ", Median(save_cpu));
  print_recovery(save_cpu_text);
  std::printf("training step alone %.3f ms, during an async local save %.3f ms: %.2fx\n",
              Median(step_alone) * 1e3, Median(step_during) * 1e3,
              Median(step_during) / Median(step_alone));
  std::printf(
      "stall / memcpy %.2fx; local write / memcpy %.2fx (alone %.2fx); recover speedup %.2fx\n",
      Median(stall_s) / Median(memcpy_s), Median(write_s) / Median(memcpy_s),
      Median(wo_s) / Median(memcpy_s), Median(load_s) / Median(rec_s));
  return 0;
}
