// A transformer-like model (embedding, decoder layers of attention + MLP +
// norms, output layer) with Adam state, laid out Megatron-style over
// TP x PP x DP: for the demo, benchmarks and end-to-end tests.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "shardpoint/state.h"
#include "tests/testing/reference.h"

namespace shardpoint::testing {

struct ModelConfig {
  int layers = 8;
  int64_t hidden = 512;
  int64_t ffn = 2048;
  int64_t vocab = 16384;
};

struct ParallelConfig {
  int tp = 1, pp = 1, dp = 1;
  // Optimizer state flat-sharded over DP (distributed optimizer); otherwise
  // replicated over DP like the parameters.
  bool distributed_optimizer = true;
  int world() const { return tp * pp * dp; }
  std::string ToString() const;
};

struct TensorSpec {
  std::string key;
  DType dtype;
  Shape shape;
  int split_dim;   // TP split dim, -1 = replicated over TP
  int layer;       // decoder layer, -1 = none
  int stage_hint;  // -1: every stage; 0: first stage; 1: last stage
  bool optimizer;
};

// Parameters in bf16 and, per parameter, fp32 main param, exp_avg, exp_avg_sq.
std::vector<TensorSpec> ModelTensors(const ModelConfig& m);
// Random truth for every tensor (seeded per key).
RefModel MakeReference(const ModelConfig& m, uint64_t seed);

// One rank's state and the memory behind it.
struct RankState {
  std::vector<std::unique_ptr<char[]>> buffers;
  State state;
  uint64_t bytes = 0;
};
// Rank = tp + TP * (dp + DP * pp). Also adds a per-rank RNG object, a common
// blob and metadata.
Result<RankState> BuildRankState(const ModelConfig& m, const ParallelConfig& p, int rank);

}  // namespace shardpoint::testing
