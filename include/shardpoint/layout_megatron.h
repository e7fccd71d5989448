// Megatron-style layouts: tensor (TP), pipeline (PP, with virtual stages) and
// expert (EP) parallelism, in the vocabulary of Megatron-Core.
//
// TP: column-parallel weights are split on dim 0, row-parallel on dim 1, norms
// and row-parallel biases are replicated (WholeTensor). Vocab-parallel
// embedding and output layers split a vocabulary padded to a multiple of
// divisible_by * tp_size; the checkpoint holds the padded shape, and a load
// into another padding uses LoadOptions::allow_shape_mismatch.
// PP: checkpoint keys carry the *global* layer number (stage offset + local
// index), never the index in a stage's module list, so every stage writes
// distinct keys; a block after the decoder (multi-token prediction) has its
// own prefix and its own layer numbers. EP: expert e of a layer is held by
// EP rank e / (num_experts / ep_size); per-expert keys carry the global
// expert index, and the stacked variant is one [E, ...] tensor split on dim 0.
//
// Pure functions, thread-safe; `data` is the caller's memory, untouched.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "shardpoint/tensor.h"

namespace shardpoint {

// Column-parallel (dim 0) and row-parallel (dim 1) TP shards, torch.chunk sizes.
Result<LocalTensor> ColumnParallel(std::string key, DType dtype, void* data, Shape global_shape,
                                   int tp_rank, int tp_size);
Result<LocalTensor> RowParallel(std::string key, DType dtype, void* data, Shape global_shape,
                                int tp_rank, int tp_size);

// `vocab` rounded up to a multiple of divisible_by * tp_size (Megatron's
// make_vocab_size_divisible_by). REQUIRES: positive arguments.
int64_t PaddedVocabSize(int64_t vocab, int64_t divisible_by, int tp_size);
// A vocab-parallel embedding or output layer: [padded_vocab, hidden] split on
// dim 0; padded_vocab must be divisible by tp_size (every rank holds as many
// rows, padding included).
Result<LocalTensor> VocabParallel(std::string key, DType dtype, void* data, int64_t padded_vocab,
                                  int64_t hidden, int tp_rank, int tp_size);

// Which decoder layers a pipeline rank holds. With vp_size virtual stages the
// model is cut into pp_size * vp_size chunks in schedule order: chunk
// (vp_stage, pp_rank) is number vp_stage * pp_size + pp_rank.
struct PipelineLayout {
  int num_layers = 0;
  int pp_size = 1;
  int vp_size = 1;
  // Layers per chunk in schedule order (pp_size * vp_size entries, summing to
  // num_layers). Empty: even (num_layers must then be divisible).
  std::vector<int> chunk_layers;
};
// The global layer numbers of chunk (pp_rank, vp_stage), ascending.
Result<std::vector<int>> StageLayers(const PipelineLayout& p, int pp_rank, int vp_stage);
// The global number of local layer `local_index` of chunk (pp_rank, vp_stage).
Result<int> GlobalLayer(const PipelineLayout& p, int pp_rank, int vp_stage, int local_index);
// "<prefix>.<layer>.<name>", e.g. LayerKey("decoder.layers", 5, "mlp.linear_fc1.weight").
// An extra block after the decoder uses its own prefix ("mtp.layers").
std::string LayerKey(std::string_view prefix, int layer, std::string_view name);

struct ExpertParallel {
  int num_experts = 0;
  int ep_rank = 0;
  int ep_size = 1;
  int local_experts() const { return ep_size > 0 ? num_experts / ep_size : 0; }
  int first_expert() const { return ep_rank * local_experts(); }
};

// The experts of this EP rank held as one grouped local tensor
// [local_experts, ...expert TP shard...], checkpointed per expert under
// key_of(global expert index) with shape `expert_shape`. tp_dim (a dim of
// expert_shape) is split over the expert-TP ranks; -1: replicated over TP.
Result<LocalTensor> PerExpertWeights(const std::function<std::string(int)>& key_of, DType dtype,
                                     void* data, Shape expert_shape, int tp_dim,
                                     const ExpertParallel& ep, int tp_rank, int tp_size);
// The same local memory checkpointed as one stacked tensor `key` of
// [num_experts, ...expert_shape], split on dim 0 over EP and on 1 + tp_dim
// over TP.
Result<LocalTensor> StackedExperts(std::string key, DType dtype, void* data, Shape expert_shape,
                                   int tp_dim, const ExpertParallel& ep, int tp_rank, int tp_size);
// Fused gate/up experts: checkpoint [E, 2I, H] (gate rows [0, I), up rows
// [I, 2I)); local [local_experts, 2 * I_tp, H] with [gate_i; up_i] per expert.
Result<LocalTensor> FusedGateUpExperts(std::string key, DType dtype, void* data, int64_t inter,
                                       int64_t hidden, const ExpertParallel& ep, int tp_rank,
                                       int tp_size);

}  // namespace shardpoint
