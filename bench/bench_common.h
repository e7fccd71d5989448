// What the save/load benchmarks share: their flags, Die, Median, and the
// bytes they fill their states with.
#pragma once

#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "shardpoint/tensor.h"

namespace shardpoint::bench {

struct Flags {
  std::string dir;
  double gib = 1;
  int ranks = 4, reps = 3, threads = 2;
  bool keep = false;
};

// Prints "<program>: msg" to stderr and exits 1.
[[noreturn]] inline void Die(const char* program, const std::string& msg) {
  std::fprintf(stderr, "%s: %s\n", program, msg.c_str());
  std::exit(1);
}

// A program's own flag: given the flag and a function returning its value
// (dies if missing), returns true if it took the flag.
using ExtraFlag =
    std::function<bool(const std::string& flag, const std::function<std::string()>& value)>;

// Parses --dir DIR --gib N --ranks R --reps K --io-threads T (--threads: the old
// spelling, still accepted) --keep over
// `defaults`, offering other flags to `extra` (with `extra_usage` for the
// error); dies on an unknown flag, a missing value or a value < 1 (gib <= 0).
inline Flags ParseFlags(const char* program, Flags defaults, int argc, char** argv,
                        const ExtraFlag& extra = nullptr, const std::string& extra_usage = "") {
  Flags f = std::move(defaults);
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) Die(program, "missing value for " + a);
      return argv[++i];
    };
    if (a == "--dir") {
      f.dir = next();
    } else if (a == "--gib") {
      f.gib = std::stod(next());
    } else if (a == "--ranks") {
      f.ranks = std::stoi(next());
    } else if (a == "--reps") {
      f.reps = std::stoi(next());
    } else if (a == "--io-threads" || a == "--threads") {  // --threads: the old spelling
      f.threads = std::stoi(next());
    } else if (a == "--keep") {
      f.keep = true;
    } else if (!extra || !extra(a, next)) {
      Die(program, "unknown flag " + a +
                       " (use --dir DIR --gib N --ranks R --reps K --io-threads T" + " --keep" +
                       extra_usage + ")");
    }
  }
  if (f.ranks < 1 || f.reps < 1 || f.threads < 1 || f.gib <= 0) {
    Die(program, "need --ranks >= 1, --reps >= 1, --io-threads >= 1, --gib > 0");
  }
  return f;
}

inline double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// Touches one byte per page of `bytes` of fresh anonymous memory and frees it:
// the next allocations reuse pages the guest holds, not pages a VM host with
// free page reporting took back (reusing those costs ~3 s of system CPU per
// GiB on this project's VMs; bench/free_page_probe.py).
inline void BackMemory(uint64_t bytes) {
  if (bytes == 0) return;
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return;  // a bench aid, not a requirement
  for (uint64_t at = 0; at < bytes; at += 4096) static_cast<volatile char*>(p)[at] = 1;
  ::munmap(p, bytes);
}

// Bytes of the elements a local tensor holds.
inline size_t Bytes(const LocalTensor& t) {
  int64_t n = t.flat ? t.flat->size() : Box::Whole(t.shape).num_elements();
  return static_cast<size_t>(n) * DTypeSize(t.dtype);
}

// Cheap deterministic bytes: xorshift64 seeded from the key and the global box, so
// TP replicas (layer norms) hold identical bytes, as a real job's do (a save
// verifies replicas by default).
inline void Fill(const LocalTensor& t) {
  const Segment& seg = t.segments.at(0);
  uint64_t x = std::hash<std::string>{}(seg.key) | 1;
  for (int64_t o : seg.global_box.offset) x = x * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(o);
  if (x == 0) x = 1;
  const size_t bytes = Bytes(t);
  char* p = static_cast<char*>(t.data);
  size_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    std::memcpy(p + i, &x, 8);
  }
  for (; i < bytes; ++i) p[i] = static_cast<char>(i);
}

}  // namespace shardpoint::bench
