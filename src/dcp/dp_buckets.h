// Megatron-Core's distributed optimizer, `dp_reshardable` layout (the default
// since Megatron-Core 0.15): the state is stored as the flat gradient-buffer
// buckets themselves, one 1-D tensor per data-parallel group g, buffer b,
// bucket k and state s:
//   optimizer.distributed.dp_group_idx_<g>.gbuf_idx_<b>.dtype_<dt>.bucket_idx_<k>.<s>
// of the bucket's unpadded size. The checkpoint does not say which parameter
// lies where: Megatron recomputes it from the live model (param_layout.py,
// distrib_optimizer.py), and so does this file, from the model tensors the
// same checkpoint holds (dp_param_order.h: which parameters, in what order):
//
// * group g is the rank in the model-parallel group: TP rank + TP * PP rank;
//   stage s holds the embedding (first), its layers (ChunkLayers) and the
//   final norm and output layer (last; with tied embeddings the last stage
//   also holds a copy of the embedding, placed but not read);
// * with virtual pipeline stages (V model chunks per stage) a stage's layers
//   are V chunks, chunk v of stage s being layers v * L / V + the stages
//   before s's share; the embedding is in chunk 0 of stage 0, the final norm
//   and output layer in chunk V - 1 of the last stage;
// * each model chunk has a buffer per parameter dtype, numbered in the order
//   the dtype's first parameter comes in the chunk, chunk 0's first (gbuf_idx
//   b runs over all chunks' buffers; "dtype_(<param>, <grad>)");
// * an MoE model's keys are "chained_0." (dense: the router, shared experts)
//   and "chained_1." (the expert optimizer: group = expert TP rank + ETP * EP
//   rank + ETP * EP * PP rank, the EP rank's experts of a stacked [L, E, ...]
//   key in TEGroupedMLP or SequentialMLP order, args.moe_grouped_gemm, each
//   expert's expert-TP shard);
// * the buffer holds its parameters in reverse `model.parameters()`
//   order (Megatron-Core's GPT model, per layer in module registration
//   order), each one TP rank's local tensor flattened; a stacked key
//   `decoder.layers.<m>` [L, ...] is L parameters, layer 0 first;
// * each parameter starts at a multiple of 64 elements; a bucket ends where
//   its stored size says (its end padding, to a multiple of lcm(DP, 128), is
//   not stored, and bucket starts are multiples of 64, so positions inside a
//   bucket are bucket-relative);
// * TP rank t's local tensor of a key is its t-th stored chunk of each layer
//   (and expert) (1 chunk: replicated, every rank holds it; 2 TP chunks of a
//   SwiGLU linear_fc1: chunks t and TP + t, [W_t; V_t]).
//
// Rebuilt, each state becomes `optimizer.state.<s>.<param key>` in the
// parameter's global shape (the keys of the `fully_reshardable` layout),
// whose chunks point at the bucket bytes (a flat range as at most 2 n - 1
// boxes, each a contiguous run). The buckets stay as stored too (a load into
// the same TP layout under another DP size, as Megatron itself does).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "shardpoint/status.h"
#include "src/format/manifest.h"

namespace shardpoint::internal_dcp {

struct DpBucketArgs {
  int tp_size = 0;              // common.pt args.tensor_model_parallel_size (0: absent)
  int pp_size = 1;              // args.pipeline_model_parallel_size
  int num_layers = -1;          // args.num_layers (-1: absent; the checkpoint's count)
  int first_stage_layers = -1;  // args.decoder_first_pipeline_num_layers (-1: none)
  int last_stage_layers = -1;   // args.decoder_last_pipeline_num_layers (-1: none)
  bool tied = false;            // args.untie_embeddings_and_output_weights is false
  int vpp_size = 1;             // args.virtual_pipeline_model_parallel_size (model chunks)
  int ep_size = 1;              // args.expert_model_parallel_size
  int etp_size = -1;            // args.expert_tensor_parallel_size (-1: absent, = tp_size)
  bool grouped_gemm = false;    // args.moe_grouped_gemm (TEGroupedMLP, else SequentialMLP)
  std::string not_derived;      // a pipeline setting whose split is not derived ("": none)

  int ExpertTp() const { return etp_size < 0 ? tp_size : etp_size; }
};

// From common.pt rendered as JSON (CommonPtToJson): args.state's
// tensor_model_parallel_size, pipeline_model_parallel_size and the pipeline
// split (num_layers, decoder_first/last_pipeline_num_layers, virtual
// pipeline stages: virtual_pipeline_model_parallel_size, or
// num_layers_per_virtual_pipeline_stage; a pipeline_model_parallel_layout
// and account_for_embedding/loss_in_pipeline_split set `not_derived`).
DpBucketArgs DpBucketArgsFromCommon(const std::string& common_json);

// The first layer of each pipeline stage and, last, `layers`: Megatron-Core's
// get_num_layers_to_build (an even split, or the first / last stage's own
// count and the rest even). Sets *why where the split is not one of those.
std::vector<int64_t> StageBounds(const DpBucketArgs& args, int64_t layers, std::string* why);

// The decoder layers [begin, end) of one model chunk.
struct LayerRange {
  int64_t begin = 0, end = 0;
  friend bool operator==(const LayerRange&, const LayerRange&) = default;
};
// Each model chunk's layers, stage s's chunk v at s * vpp_size + v:
// get_transformer_layer_offset's interleaved split (each stage's share,
// StageBounds, cut in vpp_size equal chunks; chunk v of every stage before
// chunk v + 1 of any). Sets *why where a stage's share does not divide.
std::vector<LayerRange> ChunkLayers(const DpBucketArgs& args, int64_t layers, std::string* why);

struct DpBucketRebuild {
  int buckets = 0;          // bucket tensors found (all states)
  int params = 0;           // per-parameter state tensors added
  std::string not_rebuilt;  // why the buckets are left as stored ("" if rebuilt or none)
};

// Adds the per-parameter tensors to `m` (keeping its tensors sorted by key).
// Leaves `m` unchanged, with the reason, where the layout is not one this file
// derives (a pipeline layout, other chained optimizers,
// a model tensor the known order lacks, a buffer dtype no parameter has, a
// chunking that is not one TP shard per rank). DataLoss naming the bucket key
// when the parameters do not tile the buckets (a parameter past a bucket's
// end, parameters left over or missing, buckets of one group whose states
// differ in size, a parameter's range not covered by the bucket's chunks).
Result<DpBucketRebuild> RebuildDpBuckets(const DpBucketArgs& args, internal_format::Manifest* m);

}  // namespace shardpoint::internal_dcp
