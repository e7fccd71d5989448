// A tiny transformer-like model with Adam state, laid out with the layout
// builders under six parallel layouts, for the resharding matrix test.
//
// The model: a vocab-parallel embedding, decoder layers of (norm, GQA
// attention with separate q/k/v checkpoint keys, output projection, norm,
// SwiGLU MLP with a fused [W; V] fc1 key), one MoE layer (router, fused
// gate/up experts stacked as [E, 2I, H], per-expert fc2 keys), a final norm
// and an output layer. Parameters are bf16; every parameter has fp32
// "optimizer.fp32_param.", "optimizer.exp_avg." and "optimizer.exp_avg_sq."
// tensors of the same global shape. Sizes are chosen to give uneven and
// empty TP shards and flat shards that begin and end inside fused weights.
#pragma once

#include <string>
#include <vector>

#include "shardpoint/state.h"
#include "tests/testing/ranks.h"
#include "tests/testing/reference.h"

namespace shardpoint::testing {

enum class MatrixLayout {
  kTp2Pp2Dp2,      // Megatron TP2 x PP2 x DP2, optimizer replicated over DP
  kTp4Dp2DistOpt,  // TP4 x DP2, distributed optimizer (flat shards over DP)
  kFsdp8,          // FSDP over 8: one flat buffer per module, params and state
  kFsdp2Tp2,       // FSDP2 x TP2 (DTensor _StridedShard; ShardLocal of fused)
  kEp4Etp2,        // dense TP2 x DP4; experts EP4 x expert-TP2
  kPp4Vp2Dp2,      // PP4 with 2 virtual stages x DP2, distributed optimizer
};
inline constexpr MatrixLayout kAllMatrixLayouts[] = {
    MatrixLayout::kTp2Pp2Dp2, MatrixLayout::kTp4Dp2DistOpt, MatrixLayout::kFsdp8,
    MatrixLayout::kFsdp2Tp2,  MatrixLayout::kEp4Etp2,       MatrixLayout::kPp4Vp2Dp2};

std::string MatrixLayoutName(MatrixLayout layout);
int MatrixWorldSize(MatrixLayout layout);

// Every global tensor of the model (parameters and optimizer state), with
// seeded random contents.
testing::RefModel MatrixReference(uint64_t seed);

// Every rank's State (zeroed memory) under `layout`. for_save: rank 0 also
// holds the string setting object "optimizer.sharding" = "dist" and the
// common blob "iteration=7"; otherwise every rank asks for both.
Result<std::vector<TestRank>> BuildMatrixLayout(MatrixLayout layout, bool for_save);

}  // namespace shardpoint::testing
