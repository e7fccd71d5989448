// save_load_bench: shardpoint Save / Load throughput next to fio O_DIRECT sequential I/O
// and a plain memcpy, on the same directory and the same number of bytes, on the local
// disk and through a network-filesystem model.
//
//   save_load_bench [--dir DIR] [--gib N] [--ranks R] [--reps K] [--io-threads T] [--keep]
//                   [--net LATENCY_MS,GB_PER_S | --net off] [--pause S]
//
// Saves a transformer-like model held by R ranks (threads) as TP=R, loads it back
// into the same layout, resharded (TP=R/2 x PP=2) and along the other dim (TP=R,
// every matrix cut along the dim it was not saved cut along, so each rank needs a
// strip of every saved shard), the last with cooperative load (the block exchange,
// the default) and without (every rank reads the blocks covering its strips
// itself). Every rep runs these steps,
// in an order rotated by one step per rep (so each kind of load follows each other):
//   - save, then at once a same-layout load ("right after save");
//   - save, then at once a resharded load;
//   - save without preallocation, then at once a same-layout load;
//   - pause S s, drop caches, same-layout load; the same resharded;
//   - pause S s, POSIX_FADV_DONTNEED on the data files only, same-layout load;
//   - pause S s, drop caches, other-dim load cooperative; the same without;
//   - network model (--net, default 0.5 ms per request, 1 GB/s per client, all R
//     ranks one client: one node's mount): save; drop caches, same-layout load;
//     drop caches, resharded load; drop caches, other-dim load cooperative; the
//     same without.
// "Drop caches" is `sync; echo 3 > /proc/sys/vm/drop_caches` when writable (root),
// else POSIX_FADV_DONTNEED on the data files (printed); then --preback GiB of memory
// (default twice the state) is touched and freed, so that the load finds memory a
// VM host with free page reporting has not taken back during the pause
// (bench/free_page_probe.py; bench/results/history.md#memory-this-vm-took-back). Every load right
// after a save also gets POSIX_FADV_DONTNEED on its files first, as before (an O_DIRECT save leaves
// none in the cache), and the same --preback. Request counts: storage calls by all ranks, counted
// by the same wrapper (zero latency, no cap, on the local disk).
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
#include <string_view>
#include <thread>
#include <vector>

#include "bench/bench_common.h"
#include "bench/network_storage.h"
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

// Rank `rank`'s state for the other-dim load: every matrix that `p` cuts
// along one dim is cut into as many parts along another (dim 1 for a cut
// along dim 0, else dim 0); the rest as `p` holds it. Tensors only.
RankState OtherDim(const ModelConfig& m, const ParallelConfig& p, int rank) {
  Result<RankState> saved = BuildRankState(m, p, rank);
  if (!saved.ok()) Die("BuildRankState: " + saved.status().ToString());
  RankState out;
  for (const LocalTensor& t : saved->state.tensors) {
    if (t.segments.size() != 1 || t.flat) Die("other dim: unexpected tensor layout");
    const Segment& seg = t.segments[0];
    Box box = seg.global_box;
    const Shape& shape = seg.global_shape;
    for (size_t d = 0; d < shape.size() && shape.size() >= 2; ++d) {
      if (box.shape[d] == shape[d]) continue;
      const int64_t parts = shape[d] / box.shape[d], part = box.offset[d] / box.shape[d];
      const size_t e = d == 0 ? 1 : 0;
      box.offset[d] = 0;
      box.shape[d] = shape[d];
      box.offset[e] = shape[e] * part / parts;
      box.shape[e] = shape[e] * (part + 1) / parts - box.offset[e];
      break;
    }
    const size_t bytes = static_cast<size_t>(box.num_elements()) * DTypeSize(t.dtype);
    out.buffers.emplace_back(new char[std::max<size_t>(1, bytes)]());
    LocalTensor lt;
    lt.dtype = t.dtype;
    lt.data = out.buffers.back().get();
    lt.shape = box.shape;
    lt.segments.push_back({seg.key, shape, box, Shape(shape.size(), 0)});
    out.state.tensors.push_back(std::move(lt));
    out.bytes += bytes;
  }
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
  // As bench/peers_bench.py runs it: libaio, 4 requests in flight per job, and
  // a write ends with fsync, as a save does (without it fio's figure would
  // count writes still in the device's cache).
  std::string cmd =
      "fio --name=fio_seq --directory='" + dir + "' --rw=" + rw +
      " --bs=4M --direct=1 --ioengine=libaio --iodepth=4 --numjobs=" + std::to_string(jobs) +
      " --size=" + std::to_string(per_job) + (rw == "write" ? " --end_fsync=1" : "") +
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
  double net_latency_ms = 0.5, net_gbps = 1.0, pause_s = 2, preback_gib = -1;
  bool net = true;
  const bench::Flags flags = bench::ParseFlags(
      "save_load_bench", {(fs::current_path() / "bench_ckpt").string(), 4, 8, 3, 2, false}, argc,
      argv,
      [&](const std::string& a, const std::function<std::string()>& value) {
        if (a == "--net") {
          const std::string v = value();
          if (v == "off") {
            net = false;
          } else if (std::sscanf(v.c_str(), "%lf,%lf", &net_latency_ms, &net_gbps) != 2 ||
                     net_latency_ms < 0 || net_gbps <= 0) {
            Die("--net wants LATENCY_MS,GB_PER_S (e.g. 0.5,1) or off");
          }
          return true;
        }
        if (a == "--pause") {
          pause_s = std::stod(value());
          return true;
        }
        if (a == "--preback") {
          preback_gib = std::stod(value());
          if (preback_gib < 0) Die("--preback wants GiB >= 0");
          return true;
        }
        return false;
      },
      " --net LATENCY_MS,GB_PER_S|off --pause S --preback GIB");
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
  if (net) {
    std::printf("network model: %.3f ms per request, %.3f GB/s, one client for all ranks\n",
                net_latency_ms, net_gbps);
  }

  std::vector<RankState> src = BuildAll(model, save_layout, /*fill=*/true);
  uint64_t state_bytes = 0;
  for (const auto& r : src) state_bytes += r.bytes;

  const uint64_t preback =
      preback_gib < 0 ? 2 * state_bytes : static_cast<uint64_t>(preback_gib * (1ull << 30));
  std::printf("memory touched and freed after each cache drop: %.2f GiB (--preback)\n",
              preback / double(1ull << 30));

  const bool have_fio = std::system("fio --version >/dev/null 2>&1") == 0;
  if (!have_fio) std::printf("fio: not installed\n");
  const uint64_t per_job = ((state_bytes / flags.ranks + (4u << 20) - 1) / (4u << 20)) * (4u << 20);

  std::map<std::string, std::vector<double>> gbps;  // GB/s (1e9 bytes/s)
  struct Count {
    uint64_t requests = 0, bytes = 0, needed = 0;
  };
  std::map<std::string, Count> counts;  // of the last rep
  uint64_t payload = 0;
  bool all_equal = true;
  const std::string ckpt = (fs::path(dir) / "ckpt").string();
  bench::NetworkStorage local(DefaultStorage(), 0, 0);  // counts only
  bench::NetworkStorage remote(DefaultStorage(), net_latency_ms / 1e3, net_gbps * 1e9);

  bool global_drop = true;
  auto drop_caches = [&](bool global) {
    remote.ForgetCache();
    bool dropped = false;
    if (global) {
      ::sync();
      if (FILE* f = std::fopen("/proc/sys/vm/drop_caches", "w")) {
        const bool written = std::fputs("3", f) >= 0;
        dropped = std::fclose(f) == 0 && written;  // closed once, whatever happened
      }
      global_drop = global_drop && dropped;
    }
    if (!dropped) DropCache(ckpt);
    bench::BackMemory(preback);
  };
  auto save = [&](const std::string& name, bench::NetworkStorage* storage, bool preallocate) {
    fs::remove_all(ckpt);
    ::sync();
    SaveOptions so;
    so.io_threads = flags.threads;
    so.preallocate = preallocate;
    so.storage = storage;
    const uint64_t req0 = storage->write_requests, bytes0 = storage->write_bytes;
    double t0 = Now();
    auto st = RunThreadRanks(flags.ranks, [&](Comm& c) -> Status {
      SP_ASSIGN_OR_RETURN(SaveStats s, Save(src[c.rank()].state, ckpt, c, so));
      if (c.rank() == 0) payload = s.bytes_written;
      return OkStatus();
    });
    double dt = Now() - t0;
    for (const auto& s : st)
      if (!s.ok()) Die(name + ": " + s.ToString());
    gbps[name].push_back(payload / dt / 1e9);
    counts[name] = {storage->write_requests - req0, storage->write_bytes - bytes0, payload};
  };
  // One timed load of every rank's `dst` (thread ranks): GB/s and request
  // counts recorded under `name`.
  auto timed_load = [&](const std::string& name, std::vector<RankState>& dst,
                        const LoadOptions& lo) {
    std::vector<LoadResult> res(dst.size());
    double t0 = Now();
    auto st = RunThreadRanks(static_cast<int>(dst.size()), [&](Comm& c) -> Status {
      SP_ASSIGN_OR_RETURN(res[c.rank()], Load(dst[c.rank()].state, ckpt, c, lo));
      return OkStatus();
    });
    double dt = Now() - t0;
    for (const auto& s : st)
      if (!s.ok()) Die(name + ": " + s.ToString());
    gbps[name].push_back(payload / dt / 1e9);
    Count c;
    for (const LoadResult& r : res)
      c.requests += r.requests, c.bytes += r.bytes_read, c.needed += r.bytes_needed;
    counts[name] = c;
  };
  auto load = [&](const std::string& name, bench::NetworkStorage* storage, bool resharded) {
    std::vector<RankState> dst = BuildAll(model, resharded ? reshard_layout : save_layout, false);
    LoadOptions lo;
    lo.io_threads = flags.threads;
    lo.storage = storage;
    timed_load(name, dst, lo);
    if (!resharded) {  // checked against the saved bytes (one buffer per tensor, in order)
      for (size_t r = 0; r < dst.size(); ++r)
        for (size_t b = 0; b < dst[r].buffers.size(); ++b)
          all_equal &= std::memcmp(dst[r].state.tensors[b].data, src[r].state.tensors[b].data,
                                   Bytes(src[r].state.tensors[b])) == 0;
    }
    return dst;
  };
  // Other-dim loads; the loaded bytes of every rank hashed, so that the
  // cooperative and the plain load can be compared.
  std::map<bool, std::vector<size_t>> other_hashes;
  bool other_equal = true;
  auto load_other = [&](const std::string& name, bench::NetworkStorage* storage, bool coop) {
    std::vector<RankState> dst(flags.ranks);
    for (int r = 0; r < flags.ranks; ++r) dst[r] = OtherDim(model, save_layout, r);
    LoadOptions lo;
    lo.io_threads = flags.threads;
    lo.storage = storage;
    lo.cooperative = coop;
    lo.allow_unexpected_keys = true;  // the saved per-rank objects
    lo.common_optional = true;
    timed_load(name, dst, lo);
    std::vector<size_t> h;
    for (const RankState& r : dst)
      for (const LocalTensor& t : r.state.tensors)
        h.push_back(std::hash<std::string_view>()(
            std::string_view(static_cast<const char*>(t.data), Bytes(t))));
    auto [it, fresh] = other_hashes.try_emplace(coop, h);
    other_equal &= it->second == h;
    if (other_hashes.size() == 2) other_equal &= other_hashes[false] == other_hashes[true];
  };
  auto pause = [&] { std::this_thread::sleep_for(std::chrono::duration<double>(pause_s)); };

  const char* kSave = "Save";
  const char* kSaveNoPre = "Save, no preallocate";
  const char* kSameAfter = "Load same, right after Save";
  const char* kSameAfterNoPre = "Load same, after no-prealloc Save";
  const char* kReshAfter = "Load resharded, right after Save";
  const char* kSameDropped = "Load same, pause + drop caches";
  const char* kReshDropped = "Load resharded, pause + drop caches";
  const char* kSameFadvise = "Load same, pause + fadvise only";
  const char* kNetSave = "net: Save";
  const char* kNetSame = "net: Load same (caches dropped)";
  const char* kNetResh = "net: Load resharded (dropped)";
  const char* kOtherCoop = "Load other dim, pause + drop caches";
  const char* kOtherAlone = "Load other dim, cooperative off";
  const char* kNetOtherCoop = "net: Load other dim (dropped)";
  const char* kNetOtherAlone = "net: Load other dim, coop off";
  std::vector<std::function<void()>> steps = {
      [&] {
        save(kSave, &local, true);
        drop_caches(false);  // the files only, and --preback
        load(kSameAfter, &local, false);
      },
      [&] {
        pause();
        drop_caches(true);
        load(kSameDropped, &local, false);
      },
      [&] {
        save(kSave, &local, true);
        drop_caches(false);  // the files only, and --preback
        load(kReshAfter, &local, true);
      },
      [&] {
        pause();
        drop_caches(true);
        load(kReshDropped, &local, true);
      },
      [&] {
        save(kSaveNoPre, &local, false);
        drop_caches(false);  // the files only, and --preback
        load(kSameAfterNoPre, &local, false);
      },
      [&] {
        pause();
        drop_caches(false);
        std::vector<RankState> dst = load(kSameFadvise, &local, false);
        // memcpy of the same bytes into the loaded buffers, for scale
        double m0 = Now();
        for (size_t r = 0; r < dst.size(); ++r)
          for (size_t b = 0; b < dst[r].buffers.size(); ++b)
            std::memcpy(dst[r].state.tensors[b].data, src[r].state.tensors[b].data,
                        Bytes(src[r].state.tensors[b]));
        gbps["memcpy (1 thread)"].push_back(state_bytes / (Now() - m0) / 1e9);
      },
      [&] {
        pause();
        drop_caches(true);
        load_other(kOtherCoop, &local, true);
      },
      [&] {
        pause();
        drop_caches(true);
        load_other(kOtherAlone, &local, false);
      },
  };
  if (net) {
    steps.push_back([&] { save(kNetSave, &remote, true); });
    steps.push_back([&] {
      drop_caches(true);
      load(kNetSame, &remote, false);
    });
    steps.push_back([&] {
      drop_caches(true);
      load(kNetResh, &remote, true);
    });
    steps.push_back([&] {
      drop_caches(true);
      load_other(kNetOtherCoop, &remote, true);
    });
    steps.push_back([&] {
      drop_caches(true);
      load_other(kNetOtherAlone, &remote, false);
    });
  }

  save(kSave, &local, true);  // a checkpoint for the loads that come first
  gbps[kSave].clear();
  for (int rep = 0; rep < flags.reps; ++rep) {
    if (have_fio) {
      // Fresh files, as every save writes: overwriting the last rep's files
      // (allocated blocks) ran 1.2-1.35x faster on this disk.
      fs::remove_all(fio_dir);
      fs::create_directories(fio_dir);
      double w = Fio("write", fio_dir, flags.ranks, per_job);
      double r = Fio("read", fio_dir, flags.ranks, per_job);
      if (w < 0 || r < 0) Die("fio failed");
      gbps["fio write (O_DIRECT)"].push_back(w / 1e9);
      gbps["fio read (O_DIRECT)"].push_back(r / 1e9);
    }
    for (size_t i = 0; i < steps.size(); ++i) steps[(i + rep) % steps.size()]();
  }

  std::printf("\npayload %.3f GiB (%llu bytes; rank states %.3f GiB); fio: %d jobs x %llu bytes\n",
              payload / double(1ull << 30), static_cast<unsigned long long>(payload),
              state_bytes / double(1ull << 30), flags.ranks,
              static_cast<unsigned long long>(per_job));
  std::printf(
      "drop caches: %s; pause %.1f s; fio: O_DIRECT, 4 MiB, libaio depth 4, writes end with fsync; "
      "loads verify checksums "
      "(default); every save goes to a fresh directory\n",
      global_drop ? "echo 3 > /proc/sys/vm/drop_caches" : "POSIX_FADV_DONTNEED (not root)",
      pause_s);
  std::printf("same-layout loads equal the saved bytes: %s\n", all_equal ? "yes" : "NO");
  std::printf("other-dim loads, cooperative on and off, load the same bytes: %s\n\n",
              other_equal ? "yes" : "NO");
  std::printf("%-36s %11s %7s %9s %9s   %s\n", "operation", "median GB/s", "vs fio", "requests",
              "read/need", "all reps (GB/s)");
  const char* order[] = {"fio write (O_DIRECT)",
                         "fio read (O_DIRECT)",
                         kSave,
                         kSaveNoPre,
                         kSameAfter,
                         kSameAfterNoPre,
                         kSameDropped,
                         kSameFadvise,
                         kReshAfter,
                         kReshDropped,
                         kOtherCoop,
                         kOtherAlone,
                         kNetSave,
                         kNetSame,
                         kNetResh,
                         kNetOtherCoop,
                         kNetOtherAlone,
                         "memcpy (1 thread)"};
  for (const char* name : order) {
    auto it = gbps.find(name);
    if (it == gbps.end() || it->second.empty()) continue;
    double med = Median(it->second);
    std::string ratio = "-";
    const bool is_net = std::strncmp(name, "net:", 4) == 0;
    const char* ref = is_net                               ? nullptr
                      : std::strncmp(name, "Load", 4) == 0 ? "fio read (O_DIRECT)"
                      : std::strncmp(name, "Save", 4) == 0 ? "fio write (O_DIRECT)"
                                                           : nullptr;
    if (ref && gbps.count(ref)) {
      char b[32];
      std::snprintf(b, sizeof b, "%.2fx", med / Median(gbps[ref]));
      ratio = b;
    }
    std::string req = "-", amp = "-";
    if (counts.count(name)) {
      const Count& c = counts[name];
      req = std::to_string(c.requests);
      if (std::strstr(name, "Load") && c.needed > 0) {
        char b[32];
        std::snprintf(b, sizeof b, "%.3f", double(c.bytes) / c.needed);
        amp = b;
      }
    }
    std::string all;
    for (double v : it->second) {
      char b[32];
      std::snprintf(b, sizeof b, "%s%.3f", all.empty() ? "" : " ", v);
      all += b;
    }
    std::printf("%-36s %11.3f %7s %9s %9s   %s\n", name, med, ratio.c_str(), req.c_str(),
                amp.c_str(), all.c_str());
  }
  std::printf(
      "(requests: storage calls by all ranks in the last rep: writes for a save, reads "
      "for a load; read/need: bytes read per needed byte)\n");
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  std::printf("\npeak RSS %.2f GiB\n", ru.ru_maxrss / double(1 << 20));
  if (!flags.keep) {  // Only what this run created; DIR itself only if left empty.
    fs::remove_all(ckpt);
    fs::remove_all(fio_dir);
    std::error_code ec;
    fs::remove(dir, ec);
  }
  return all_equal && other_equal ? 0 : 1;
}
