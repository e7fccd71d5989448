// What the save/load benchmarks share: their flags, Die and Median.
#pragma once

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

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

// Parses --dir DIR --gib N --ranks R --reps K --threads T --keep over
// `defaults`; dies on an unknown flag, a missing value or a value < 1
// (gib <= 0).
inline Flags ParseFlags(const char* program, Flags defaults, int argc, char** argv) {
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
    } else if (a == "--threads") {
      f.threads = std::stoi(next());
    } else if (a == "--keep") {
      f.keep = true;
    } else {
      Die(program,
          "unknown flag " + a + " (use --dir DIR --gib N --ranks R --reps K --threads T --keep)");
    }
  }
  if (f.ranks < 1 || f.reps < 1 || f.threads < 1 || f.gib <= 0) {
    Die(program, "need --ranks >= 1, --reps >= 1, --threads >= 1, --gib > 0");
  }
  return f;
}

inline double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace shardpoint::bench
