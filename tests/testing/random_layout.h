// Random global tensors and random layouts of them over random rank counts,
// for the save -> load property test. Seeded and reproducible.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "shardpoint/state.h"
#include "tests/testing/reference.h"

namespace shardpoint::testing {

struct RandomRank {
  std::vector<std::unique_ptr<char[]>> buffers;
  State state;
};

// 1-4 tensors of random dtype and rank 0-4 (some with zero elements).
testing::RefModel RandomModel(std::mt19937_64& rng);

// A random layout of every tensor of `model` over `ranks` ranks: a random
// partition into boxes, replicas, several boxes fused into one local tensor,
// flat-range shards of local tensors, padded (non-contiguous) strides.
std::vector<RandomRank> RandomLayout(const testing::RefModel& model, int ranks,
                                     std::mt19937_64& rng);

}  // namespace shardpoint::testing
