// Which model parameters a Megatron-Core gradient buffer holds, and in what
// order (dp_buckets.h places them): the GPT model's parameters in
// `model.parameters()` order, from the model tensors a torch_dist checkpoint
// stores; each pipeline stage's model chunks' share of them; an expert
// data-parallel group's experts; and one TP rank's local tensor of each.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "src/dcp/dp_buckets.h"
#include "src/format/manifest.h"

namespace shardpoint::internal_dcp {

constexpr int64_t kFirstStage = -1, kLastStage = -2;  // ParamRef::at of non-layer parameters

struct ParamRef {
  size_t tensor = 0;         // the model key's index in m.tensors
  int64_t layer = -1;        // a layer of a stacked key; -1: the whole key
  int64_t expert = -1;       // an expert of a stacked experts key (its dim 1)
  int64_t at = kFirstStage;  // its decoder layer, or kFirstStage / kLastStage
  bool shadow = false;       // the last stage's copy of a tied embedding: placed, not emitted
};

struct Order {
  std::vector<ParamRef> params;   // the dense optimizer's
  std::vector<ParamRef> experts;  // the expert optimizer's
  int64_t layers = 0;             // decoder layers the checkpoint holds
};

// One TP rank's local tensor of a parameter: global boxes in its flat order.
struct Local {
  std::vector<Box> pieces;
  int64_t numel = 0;
  bool replicated = false;
};

// Digits at *pos (at most 9) into *out; false if none.
bool ReadInt(std::string_view s, size_t* pos, int* out);
// Whether `lit` is at *pos (then skipped).
bool Expect(std::string_view s, size_t* pos, std::string_view lit);

// "'key' layer l expert e" for messages.
std::string Describe(const internal_format::Manifest& m, const ParamRef& p);

// The model's parameters in `model.parameters()` order, from the model
// tensors (every tensor not under "optimizer."), experts in TEGroupedMLP
// (`grouped`) or SequentialMLP order, in the dense order at their place
// (`dense_experts`: EP 1 and expert TP = TP, one optimizer) or apart.
// Known buffers (the router's expert_bias) are skipped. Sets *why if a
// tensor is not in the order known.
Order ParamOrder(const internal_format::Manifest& m, bool grouped, bool dense_experts,
                 std::string* why);

// TP rank `tp`'s local tensor of `p` (an expert's: expert TP rank of
// `tp_size`); sets *why if its chunks are not one TP shard per rank.
Local LocalOf(const internal_format::Manifest& m, const ParamRef& p, int tp, int tp_size,
              std::string* why);

// Pipeline stage `pp`'s model chunk `v` (`chunks[pp * V + v]` its layers):
// the embedding in the first chunk of the first stage, the final norm and
// the output layer in the last chunk of the last (with tied embeddings and
// PP > 1 also the embedding's copy, placed but not read), its layers between.
std::vector<ParamRef> ChunkParams(const internal_format::Manifest& m, const Order& order,
                                  const DpBucketArgs& args, const std::vector<LayerRange>& chunks,
                                  int pp, int v);

// Expert data-parallel group g's experts in model chunk v: EP rank
// (g / ETP) % EP's experts of the layers of stage g / (ETP * EP)'s chunk v.
std::vector<ParamRef> ExpertChunkParams(const internal_format::Manifest& m, const Order& order,
                                        const DpBucketArgs& args,
                                        const std::vector<LayerRange>& chunks, int g, int v,
                                        std::string* why);

}  // namespace shardpoint::internal_dcp
