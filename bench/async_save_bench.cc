// async_save_bench: how long SaveAsync stalls the caller, beside the total time
// until its Wait() returns, a plain synchronous Save of the same state, and
// plain memcpys of the same bytes, in one run.
//
//   async_save_bench [--dir DIR] [--gib N] [--ranks R] [--reps K] [--io-threads T] [--keep]
//
// R ranks (threads) hold a transformer-like model with Adam state laid out as
// TP=R (N GiB of tensors in all). Each rank keeps two AsyncSavers for the whole
// run: a "cold" one, whose staging pool is created by its first save, and a
// "reserved" one, whose pool AsyncSaver::Reserve created and faulted in before
// the first save (that time is printed too). Every rep saves with both (order
// alternating), then synchronously, then memcpys. The stall of save N is the
// time SaveAsync blocked the caller; the first save's stall is printed apart
// from the later ones' (median of reps 2..K). Other figures: the median over K
// reps. Times across ranks: the slowest rank.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_common.h"
#include "shardpoint/async_save.h"
#include "shardpoint/checkpoint.h"
#include "shardpoint/comm.h"
#include "tests/testing/transformer.h"

namespace fs = std::filesystem;
using namespace shardpoint;
using testing::BuildRankState;
using testing::ModelConfig;
using testing::ModelTensors;
using testing::ParallelConfig;
using testing::RankState;

namespace {

using bench::Bytes;
using bench::Fill;
using bench::Median;

[[noreturn]] void Die(const std::string& msg) { bench::Die("async_save_bench", msg); }

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

uint64_t ModelBytes(const ModelConfig& m) {
  uint64_t total = 0;
  for (const auto& s : ModelTensors(m)) {
    total += static_cast<uint64_t>(Box::Whole(s.shape).num_elements()) * DTypeSize(s.dtype);
  }
  return total;
}

// Smallest hidden (multiple of `tp`; ffn = 4h, vocab = 16h, 8 layers) with >= `target` bytes.
ModelConfig ScaleModel(uint64_t target, int tp) {
  ModelConfig m;
  m.layers = 8;
  for (int64_t h = tp;; h += tp) {
    m.hidden = h, m.ffn = 4 * h, m.vocab = 16 * h;
    if (ModelBytes(m) >= target) return m;
  }
}

double Max(const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); }

void CheckAll(const std::vector<Status>& st, const std::string& what) {
  for (size_t r = 0; r < st.size(); ++r) {
    if (!st[r].ok()) Die(what + ": rank " + std::to_string(r) + ": " + st[r].ToString());
  }
}

std::string List(const std::vector<double>& v, double scale) {
  std::string all;
  for (double x : v) {
    char b[32];
    std::snprintf(b, sizeof b, "%s%.1f", all.empty() ? "" : " ", x * scale);
    all += b;
  }
  return all;
}

}  // namespace

int main(int argc, char** argv) {
  const bench::Flags flags = bench::ParseFlags(
      "async_save_bench", {(fs::current_path() / "async_bench_ckpt").string(), 1, 4, 5, 2, false},
      argc, argv);
  const ModelConfig model =
      ScaleModel(static_cast<uint64_t>(flags.gib * (1ull << 30)), flags.ranks);
  const ParallelConfig layout{flags.ranks, 1, 1, false};
  const int n = flags.ranks;
  fs::create_directories(flags.dir);
  const std::string async_dir = (fs::path(flags.dir) / "async").string();
  const std::string sync_dir = (fs::path(flags.dir) / "sync").string();

  std::vector<RankState> src(n);
  CheckAll(RunThreadRanks(n,
                          [&](Comm& c) -> Status {
                            SP_ASSIGN_OR_RETURN(src[c.rank()],
                                                BuildRankState(model, layout, c.rank()));
                            for (const auto& t : src[c.rank()].state.tensors) Fill(t);
                            return OkStatus();
                          }),
           "BuildRankState");
  uint64_t state_bytes = 0;
  for (const auto& r : src) state_bytes += r.bytes;
  // memcpy destinations, touched once so page faults are not timed.
  std::vector<std::unique_ptr<char[]>> dst(n);
  for (int r = 0; r < n; ++r) {
    dst[r].reset(new char[src[r].bytes]);
    std::memset(dst[r].get(), 1, src[r].bytes);
  }

  std::printf("model: %d layers, hidden %lld, ffn %lld, vocab %lld: %.3f GiB of tensors\n",
              model.layers, static_cast<long long>(model.hidden), static_cast<long long>(model.ffn),
              static_cast<long long>(model.vocab), state_bytes / double(1ull << 30));
  std::printf("%s, %d ranks (threads), %d io_threads per rank, %d reps, dir %s, %u cpus\n",
              layout.ToString().c_str(), n, flags.threads, flags.reps, flags.dir.c_str(),
              std::thread::hardware_concurrency());

  SaveOptions so;
  so.io_threads = flags.threads;
  so.overwrite = true;
  std::vector<std::unique_ptr<AsyncSaver>> cold(n), reserved(n);
  for (auto& s : cold) s = std::make_unique<AsyncSaver>();
  for (auto& s : reserved) s = std::make_unique<AsyncSaver>();
  // The reserved savers' pools, created and faulted in ahead of the first save.
  std::vector<double> res(n);
  bool huge = true;
  CheckAll(RunThreadRanks(n,
                          [&](Comm& c) -> Status {
                            const int r = c.rank();
                            const auto t0 = Clock::now();
                            SP_RETURN_IF_ERROR(reserved[r]->Reserve(src[r].state));
                            res[r] = Since(t0);
                            return OkStatus();
                          }),
           "Reserve");
  for (auto& s : reserved) huge = huge && s->pool_huge_pages();
  const double reserve_s = Max(res);
  // The same with transparent huge pages requested (a pool made and dropped).
  CheckAll(RunThreadRanks(n,
                          [&](Comm& c) -> Status {
                            const int r = c.rank();
                            AsyncSaver thp(AsyncSaverOptions{0, /*huge_pages=*/true});
                            const auto t0 = Clock::now();
                            SP_RETURN_IF_ERROR(thp.Reserve(src[r].state));
                            res[r] = Since(t0);
                            if (!thp.pool_huge_pages()) res[r] = -1;
                            return OkStatus();
                          }),
           "Reserve (huge pages)");
  const double reserve_huge_s = *std::min_element(res.begin(), res.end()) < 0 ? -1 : Max(res);

  // stall[k][rep], handle-reported stall and total per saver kind (0 cold, 1 reserved).
  std::vector<double> stall[2], stall_handle[2], total[2], sync, memcpy1, memcpyn;
  int grew[2] = {0, 0};
  uint64_t staged = 0, payload = 0;
  for (int rep = 0; rep < flags.reps; ++rep) {
    for (int i = 0; i < 2; ++i) {
      const int k = (rep + i) % 2;  // alternate which kind saves first
      auto& savers = k == 0 ? cold : reserved;
      // Async: the stall, and the time until Wait() returns.
      std::vector<double> st(n), sth(n), tot(n);
      std::vector<int> gr(n);
      CheckAll(RunThreadRanks(n,
                              [&](Comm& c) -> Status {
                                const int r = c.rank();
                                SP_RETURN_IF_ERROR(c.Barrier());
                                const auto t0 = Clock::now();
                                SaveHandle h =
                                    SaveAsync(*savers[r], src[r].state, async_dir, c, so);
                                st[r] = Since(t0);
                                sth[r] = h.stall_seconds();
                                gr[r] = h.pool_grew();
                                // The caller may change its tensors now.
                                std::memset(src[r].state.tensors[0].data, rep & 0xff, 64);
                                Result<SaveStats> s = h.Wait();
                                tot[r] = Since(t0);
                                if (s.ok() && r == 0) payload = s->bytes_written;
                                return s.status();
                              }),
               "SaveAsync");
      for (int r = 0; r < n; ++r) grew[k] += gr[r];
      stall[k].push_back(Max(st));
      stall_handle[k].push_back(Max(sth));
      total[k].push_back(Max(tot));
    }
    staged = 0;
    for (int r = 0; r < n; ++r) staged += cold[r]->pool_bytes();

    // Synchronous Save of the same state.
    std::vector<double> sy(n);
    CheckAll(RunThreadRanks(n,
                            [&](Comm& c) -> Status {
                              SP_RETURN_IF_ERROR(c.Barrier());
                              const auto t0 = Clock::now();
                              Status s = Save(src[c.rank()].state, sync_dir, c, so).status();
                              sy[c.rank()] = Since(t0);
                              return s;
                            }),
             "Save");
    sync.push_back(Max(sy));

    // One plain memcpy of the same bytes, on one thread...
    auto t0 = Clock::now();
    for (int r = 0; r < n; ++r) {
      size_t at = 0;
      for (const auto& t : src[r].state.tensors) {
        std::memcpy(dst[r].get() + at, t.data, Bytes(t));
        at += Bytes(t);
      }
    }
    memcpy1.push_back(Since(t0));
    // ...and on R threads, one per rank (what staging does).
    t0 = Clock::now();
    {
      std::vector<std::thread> ts;
      for (int r = 0; r < n; ++r) {
        ts.emplace_back([&, r] {
          size_t at = 0;
          for (const auto& t : src[r].state.tensors) {
            std::memcpy(dst[r].get() + at, t.data, Bytes(t));
            at += Bytes(t);
          }
        });
      }
      for (auto& t : ts) t.join();
    }
    memcpyn.push_back(Since(t0));
  }

  const double gb = state_bytes / 1e9;
  std::printf("\nstate %.3f GiB (%llu bytes), staging pool %.3f GiB, payload written %.3f GiB\n",
              state_bytes / double(1ull << 30), static_cast<unsigned long long>(state_bytes),
              staged / double(1ull << 30), payload / double(1ull << 30));
  std::printf(
      "AsyncSaver::Reserve ahead of the first save: %.1f ms (slowest rank), huge pages %s\n",
      reserve_s * 1e3, huge ? "on" : "off (the default)");
  if (reserve_huge_s < 0) {
    std::printf("  the same with huge pages requested: not available (madvise refused)\n");
  } else {
    std::printf("  the same with huge pages requested: %.1f ms\n", reserve_huge_s * 1e3);
  }
  std::printf("saves whose pool grew (rank-saves): cold %d, reserved %d\n\n", grew[0], grew[1]);
  std::printf("%-44s %10s %8s %9s   %s\n", "operation", "median ms", "GB/s", "vs memcpy",
              "all reps (ms)");
  const double ref = Median(memcpy1);
  auto row = [&](const std::string& name, const std::vector<double>& v) {
    if (v.empty()) return;
    const double med = Median(v);
    std::printf("%-44s %10.1f %8.2f %8.2fx   %s\n", name.c_str(), med * 1e3, gb / med, med / ref,
                List(v, 1e3).c_str());
  };
  for (int k = 0; k < 2; ++k) {
    const std::string pool = k == 0 ? "cold pool" : "reserved pool";
    row("stall, first save, " + pool, {stall[k][0]});
    row("stall, later saves, " + pool, {stall[k].begin() + 1, stall[k].end()});
    row("  (SaveHandle::stall_seconds, all saves)", stall_handle[k]);
    row("save_async total (until wait()), " + pool, total[k]);
  }
  row("Save (synchronous)", sync);
  row("memcpy of the same bytes, 1 thread", memcpy1);
  row(("memcpy of the same bytes, " + std::to_string(n) + " threads").c_str(), memcpyn);

  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  std::printf("\npeak RSS %.2f GiB\n", ru.ru_maxrss / double(1 << 20));
  cold.clear();
  reserved.clear();
  if (!flags.keep) {  // Only what this run created; DIR itself only if left empty.
    fs::remove_all(async_dir);
    fs::remove_all(sync_dir);
    std::error_code ec;
    fs::remove(flags.dir, ec);
  }
  return 0;
}
