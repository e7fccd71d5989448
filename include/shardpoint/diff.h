// Comparing two checkpoints (shardpoint, HF model or PyTorch DCP; any
// layouts) tensor by tensor in shardpoint keys. Local (one process).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "shardpoint/hf_mapping.h"
#include "shardpoint/resources.h"
#include "shardpoint/status.h"
#include "shardpoint/storage.h"

namespace shardpoint {

struct DiffEntry {
  enum Kind { kEqual, kDifferent, kOnlyA, kOnlyB, kMismatch };
  std::string key;
  Kind kind = kEqual;
  double max_abs_diff = 0;  // kDifferent: the largest |a - b| (as f64; inf for NaN vs number)
  int64_t num_different = 0;
  std::string note;  // kMismatch: dtype or shape
};
struct DiffReport {
  std::vector<DiffEntry> entries;  // sorted by key
  bool equal() const;
};
// Resources (resources.h): storage, pool (blocks are compared on it and on
// the calling thread; without one the call makes io_threads - 1 threads, so
// io_threads blocks are in flight), log: one line with the outcome.
struct DiffOptions : Resources {
  // Deprecated spelling of io_threads, kept so that old code compiles: when
  // > 0 it is used instead of io_threads. Default 0.
  int threads = 0;
  // Tensors are compared in blocks of this many bytes (as f64). Default 32 MiB.
  size_t block_bytes = size_t{32} << 20;
  // |a - b| <= atol counts as equal (0: bitwise).
  double atol = 0;
  std::map<std::string, int64_t> variables;
};
// Compares two checkpoints (shardpoint or HF dirs, any layouts) tensor by
// tensor in shardpoint keys: HF dirs are mapped with `mapping`.
Result<DiffReport> DiffCheckpoints(const std::string& a, const std::string& b,
                                   const HfMapping& mapping, const DiffOptions& options = {});

}  // namespace shardpoint
