// save_load_bench: shardpoint Save / Load throughput next to fio O_DIRECT sequential I/O
// and a plain memcpy, on the same directory and the same number of bytes.
//
//   save_load_bench [--dir DIR] [--gib N] [--ranks R] [--reps K] [--threads T] [--keep]
//
// Saves a transformer-like model held by R ranks (threads) as TP=R, loads it back
// into the same layout and resharded (TP=R/2 x PP=2). The page cache is dropped for
// the checkpoint files (POSIX_FADV_DONTNEED) before each load.
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/bench_common.h"
#include "shardpoint/checkpoint.h"
#include "shardpoint/comm.h"
#include "src/testing/transformer.h"

namespace fs = std::filesystem;
using namespace shardpoint;
using shardpoint::internal::BuildRankState;
using shardpoint::internal::ModelConfig;
using shardpoint::internal::ModelTensors;
using shardpoint::internal::ParallelConfig;
using shardpoint::internal::RankState;

namespace {

using bench::Bytes;
using bench::Fill;
using bench::Median;

[[noreturn]] void Die(const std::string& msg) { bench::Die("save_load_bench", msg); }

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

uint64_t ModelBytes(const ModelConfig& m) {
  uint64_t total = 0;
  for (const auto& s : ModelTensors(m)) {
    total += static_cast<uint64_t>(Box::Whole(s.shape).num_elements()) * DTypeSize(s.dtype);
  }
  return total;
}

// Smallest hidden (multiple of 64; ffn = 4h, vocab = 16h, 8 layers) with >= `target` bytes.
ModelConfig ScaleModel(uint64_t target) {
  ModelConfig m;
  m.layers = 8;
  for (int64_t h = 64;; h += 64) {
    m.hidden = h, m.ffn = 4 * h, m.vocab = 16 * h;
    if (ModelBytes(m) >= target) return m;
  }
}

std::vector<RankState> BuildAll(const ModelConfig& m, const ParallelConfig& p, bool fill) {
  std::vector<RankState> out(p.world());
  auto st = RunThreadRanks(p.world(), [&](Comm& c) -> Status {
    SP_ASSIGN_OR_RETURN(out[c.rank()], BuildRankState(m, p, c.rank()));
    if (fill)
      for (const auto& t : out[c.rank()].state.tensors) Fill(t);
    return OkStatus();
  });
  for (const auto& s : st)
    if (!s.ok()) Die("BuildRankState: " + s.ToString());
  return out;
}

void DropCache(const std::string& dir) {
  for (const auto& e : fs::directory_iterator(fs::path(dir) / "data")) {
    int fd = ::open(e.path().c_str(), O_RDONLY);
    if (fd < 0) Die("open " + e.path().string());
    ::fdatasync(fd);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

// Runs fio and returns the job group's bandwidth in bytes/s, or -1 on failure.
double Fio(const std::string& rw, const std::string& dir, int jobs, uint64_t per_job) {
  std::string cmd = "fio --name=fio_seq --directory='" + dir + "' --rw=" + rw +
                    " --bs=4M --direct=1 --ioengine=psync --numjobs=" + std::to_string(jobs) +
                    " --size=" + std::to_string(per_job) +
                    " --group_reporting --output-format=json 2>/dev/null";
  FILE* f = ::popen(cmd.c_str(), "r");
  if (!f) return -1;
  std::string out;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) out.append(buf, n);
  if (::pclose(f) != 0) return -1;
  auto j = nlohmann::json::parse(out, nullptr, false);
  if (j.is_discarded() || !j.contains("jobs") || j["jobs"].empty()) return -1;
  return j["jobs"][0][rw == "write" ? "write" : "read"]["bw_bytes"].get<double>();
}

}  // namespace

int main(int argc, char** argv) {
  const bench::Flags flags = bench::ParseFlags(
      "save_load_bench", {(fs::current_path() / "bench_ckpt").string(), 4, 8, 3, 2, false}, argc,
      argv);
  if (flags.ranks < 2 || flags.ranks % 2) Die("need an even --ranks >= 2");
  const ModelConfig model = ScaleModel(static_cast<uint64_t>(flags.gib * (1ull << 30)));
  const ParallelConfig save_layout{flags.ranks, 1, 1, false};
  const ParallelConfig reshard_layout{flags.ranks / 2, 2, 1, false};
  const std::string dir = flags.dir;
  fs::create_directories(dir);
  const std::string fio_dir = (fs::path(dir) / "fio").string();
  fs::create_directories(fio_dir);

  std::printf("model: %d layers, hidden %lld, ffn %lld, vocab %lld: %.3f GiB of tensors\n",
              model.layers, static_cast<long long>(model.hidden), static_cast<long long>(model.ffn),
              static_cast<long long>(model.vocab), ModelBytes(model) / double(1ull << 30));
  std::printf("dir %s, %d ranks (threads), %d io_threads per rank, %d reps\n", dir.c_str(),
              flags.ranks, flags.threads, flags.reps);
  std::printf("save %s; same-layout load %s; resharded load %s\n", save_layout.ToString().c_str(),
              save_layout.ToString().c_str(), reshard_layout.ToString().c_str());

  std::vector<RankState> src = BuildAll(model, save_layout, /*fill=*/true);
  uint64_t state_bytes = 0;
  for (const auto& r : src) state_bytes += r.bytes;

  const bool have_fio = std::system("fio --version >/dev/null 2>&1") == 0;
  if (!have_fio) std::printf("fio: not installed\n");
  const uint64_t per_job = ((state_bytes / flags.ranks + (4u << 20) - 1) / (4u << 20)) * (4u << 20);

  std::map<std::string, std::vector<double>> gbps;  // GB/s (1e9 bytes/s)
  uint64_t payload = 0, read_same = 0, read_reshard = 0;
  bool same_equal = true;
  SaveOptions so;
  so.io_threads = flags.threads;
  LoadOptions lo;
  lo.io_threads = flags.threads;
  const std::string ckpt = (fs::path(dir) / "ckpt").string();

  auto load = [&](std::vector<RankState>& dst, uint64_t* bytes_read) {
    DropCache(ckpt);
    std::vector<uint64_t> per_rank(dst.size());
    double t0 = Now();
    auto st = RunThreadRanks(static_cast<int>(dst.size()), [&](Comm& c) -> Status {
      SP_ASSIGN_OR_RETURN(LoadResult r, Load(dst[c.rank()].state, ckpt, c, lo));
      per_rank[c.rank()] = r.bytes_read;
      return OkStatus();
    });
    double dt = Now() - t0;
    for (const auto& s : st)
      if (!s.ok()) Die("Load: " + s.ToString());
    *bytes_read = 0;
    for (uint64_t b : per_rank) *bytes_read += b;
    return payload / dt / 1e9;
  };

  for (int rep = 0; rep < flags.reps; ++rep) {
    if (have_fio) {
      double w = Fio("write", fio_dir, flags.ranks, per_job);
      double r = Fio("read", fio_dir, flags.ranks, per_job);
      if (w < 0 || r < 0) Die("fio failed");
      gbps["fio write (O_DIRECT)"].push_back(w / 1e9);
      gbps["fio read (O_DIRECT)"].push_back(r / 1e9);
    }
    // Save, into a fresh directory as a training job does (iter_N/): the
    // previous checkpoint is removed and synced outside the timing. Twice,
    // with and without preallocating the data files, in alternating order.
    for (int v = 0; v < 2; ++v) {
      const bool preallocate = (v + rep) % 2 == 0;
      so.preallocate = preallocate;
      fs::remove_all(ckpt);
      ::sync();
      double t0 = Now();
      auto st = RunThreadRanks(flags.ranks, [&](Comm& c) -> Status {
        SP_ASSIGN_OR_RETURN(SaveStats s, Save(src[c.rank()].state, ckpt, c, so));
        if (c.rank() == 0) payload = s.bytes_written;
        return OkStatus();
      });
      double dt = Now() - t0;
      for (const auto& s : st)
        if (!s.ok()) Die("Save: " + s.ToString());
      gbps[preallocate ? "shardpoint Save" : "Save, no preallocate"].push_back(payload / dt / 1e9);
    }
    {  // Same-layout load, checked against the saved bytes; then memcpy for scale.
      std::vector<RankState> dst = BuildAll(model, save_layout, false);
      gbps["shardpoint Load same layout"].push_back(load(dst, &read_same));
      // BuildRankState allocates one buffer per tensor, in order.
      for (size_t r = 0; r < dst.size(); ++r)
        for (size_t b = 0; b < dst[r].buffers.size(); ++b)
          same_equal &= std::memcmp(dst[r].state.tensors[b].data, src[r].state.tensors[b].data,
                                    Bytes(src[r].state.tensors[b])) == 0;
      double m0 = Now();
      for (size_t r = 0; r < dst.size(); ++r)
        for (size_t b = 0; b < dst[r].buffers.size(); ++b)
          std::memcpy(dst[r].state.tensors[b].data, src[r].state.tensors[b].data,
                      Bytes(src[r].state.tensors[b]));
      gbps["memcpy (1 thread)"].push_back(state_bytes / (Now() - m0) / 1e9);
    }
    {
      std::vector<RankState> dst = BuildAll(model, reshard_layout, false);
      gbps["shardpoint Load resharded"].push_back(load(dst, &read_reshard));
    }
  }

  std::printf("\npayload %.3f GiB (%llu bytes; rank states %.3f GiB); fio: %d jobs x %llu bytes\n",
              payload / double(1ull << 30), static_cast<unsigned long long>(payload),
              state_bytes / double(1ull << 30), flags.ranks,
              static_cast<unsigned long long>(per_job));
  std::printf(
      "page cache dropped for the checkpoint files with POSIX_FADV_DONTNEED before each "
      "load; fio uses O_DIRECT; loads verify checksums (default); every save goes to a fresh "
      "directory\n");
  std::printf("bytes read: same layout %.3f GiB, resharded %.3f GiB (per rep)\n",
              read_same / double(1ull << 30), read_reshard / double(1ull << 30));
  std::printf("same-layout load equals saved bytes: %s\n\n", same_equal ? "yes" : "NO");
  std::printf("%-30s %10s %10s   %s\n", "operation", "median GB/s", "vs fio", "all reps (GB/s)");
  const char* order[] = {
      "fio write (O_DIRECT)", "fio read (O_DIRECT)",         "shardpoint Save",
      "Save, no preallocate", "shardpoint Load same layout", "shardpoint Load resharded",
      "memcpy (1 thread)"};
  for (const char* name : order) {
    auto it = gbps.find(name);
    if (it == gbps.end()) continue;
    double med = Median(it->second);
    std::string ratio = "-";
    const char* ref = std::strstr(name, "Save")   ? "fio write (O_DIRECT)"
                      : std::strstr(name, "Load") ? "fio read (O_DIRECT)"
                                                  : nullptr;
    if (ref && gbps.count(ref)) {
      char b[32];
      std::snprintf(b, sizeof b, "%.2fx", med / Median(gbps[ref]));
      ratio = b;
    }
    std::string all;
    for (double v : it->second) {
      char b[32];
      std::snprintf(b, sizeof b, "%s%.3f", all.empty() ? "" : " ", v);
      all += b;
    }
    std::printf("%-30s %10.3f %10s   %s\n", name, med, ratio.c_str(), all.c_str());
  }
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  std::printf("\npeak RSS %.2f GiB\n", ru.ru_maxrss / double(1 << 20));
  if (!flags.keep) {  // Only what this run created; DIR itself only if left empty.
    fs::remove_all(ckpt);
    fs::remove_all(fio_dir);
    std::error_code ec;
    fs::remove(dir, ec);
  }
  return same_equal ? 0 : 1;
}
