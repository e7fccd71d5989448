#include "src/dcp/dp_param_order.h"

#include <algorithm>

using shardpoint::internal_format::ChunkRecord;
using shardpoint::internal_format::Manifest;
using shardpoint::internal_format::TensorRecord;

namespace shardpoint::internal_dcp {
namespace {

constexpr std::string_view kLayers = "decoder.layers.";

// Megatron-Core's GPTModel parameters in `model.parameters()` order (the
// Transformer Engine and the local layer specs): the embedding, each layer's
// modules as registered (Attention's linear_proj before SelfAttention's
// linear_qkv; a TE linear's fused norm before its weight; a module's own
// parameters before its submodules': the router's weight and bias, then the
// MoE layer's SharedExpertMLP, whose gate_weight comes before its linear_fc1
// and linear_fc2), the final norm, the output layer. A model lacks most of
// these; the order of those it has is what matters.
constexpr const char* kBefore[] = {"embedding.word_embeddings.weight",
                                   "embedding.position_embeddings.weight"};
constexpr const char* kLayerParams[] = {
    "input_layernorm.weight",
    "input_layernorm.bias",
    "self_attention.linear_proj.weight",
    "self_attention.linear_proj.bias",
    "self_attention.linear_qkv.layer_norm_weight",
    "self_attention.linear_qkv.layer_norm_bias",
    "self_attention.linear_qkv.weight",
    "self_attention.linear_qkv.bias",
    "self_attention.q_layernorm.weight",
    "self_attention.q_layernorm.bias",
    "self_attention.k_layernorm.weight",
    "self_attention.k_layernorm.bias",
    "pre_mlp_layernorm.weight",
    "pre_mlp_layernorm.bias",
    "mlp.router.weight",
    "mlp.router.bias",
    "mlp.shared_experts.gate_weight",
    "mlp.shared_experts.linear_fc1.weight",
    "mlp.shared_experts.linear_fc2.weight",
    "mlp.linear_fc1.layer_norm_weight",
    "mlp.linear_fc1.layer_norm_bias",
    "mlp.linear_fc1.weight",
    "mlp.linear_fc1.bias",
    "mlp.linear_fc2.weight",
    "mlp.linear_fc2.bias",
};
// The experts module comes after the router's parameters, before the shared experts.
constexpr std::string_view kExpertsAfter = "mlp.router.bias";
// A layer's persistent buffers: stored model tensors that are no parameter
// (the router's aux-loss-free load-balancing bias), in no gradient buffer.
constexpr const char* kLayerBuffers[] = {"mlp.router.expert_bias"};
// An MoE layer's experts (TEGroupedMLP's / SequentialMLP's), stacked
// [layers, experts, ...]: the expert optimizer's parameters.
constexpr const char* kExperts[] = {"mlp.experts.linear_fc1.weight",
                                    "mlp.experts.linear_fc2.weight"};
constexpr const char* kAfter[] = {"decoder.final_layernorm.weight", "decoder.final_layernorm.bias",
                                  "output_layer.weight"};

bool IsOptimizerKey(const std::string& key) {
  return key.rfind("optimizer.", 0) == 0 ||
         (key.rfind("chained_", 0) == 0 && key.find(".optimizer.") != std::string::npos);
}

// Layer l's experts in model.parameters() order: TEGroupedMLP (grouped
// GEMM) registers linear_fc1's weight0..weightN-1, then linear_fc2's;
// SequentialMLP local expert 0's linear_fc1, linear_fc2, then expert 1's.
// All E experts here; each EP rank's buffer holds its own.
void AddExperts(const Manifest& m, int64_t l, bool grouped, std::vector<bool>* used,
                std::vector<ParamRef>* out) {
  int64_t t[2], experts = -1;
  for (int i = 0; i < 2; ++i) {
    t[i] = m.FindTensor(std::string(kLayers) + kExperts[i]);
    if (t[i] < 0 || m.tensors[t[i]].shape.size() < 2 || l >= m.tensors[t[i]].shape[0]) return;
    experts = m.tensors[t[i]].shape[1];
  }
  for (int64_t a = 0; a < (grouped ? 2 : experts); ++a) {
    for (int64_t b = 0; b < (grouped ? experts : 2); ++b) {
      const int64_t fc = grouped ? a : b, e = grouped ? b : a;
      out->push_back({static_cast<size_t>(t[fc]), l, e, l});
      (*used)[t[fc]] = true;
    }
  }
}

// The decoder layers the model tensors hold (stacked or per-layer keys).
int64_t CountLayers(const Manifest& m) {
  int64_t layers = 0;
  for (const TensorRecord& t : m.tensors) {
    if (t.key.rfind(kLayers, 0) != 0 || t.shape.empty()) continue;
    size_t pos = kLayers.size();
    int l = 0;
    if (ReadInt(t.key, &pos, &l) && Expect(t.key, &pos, ".")) {
      layers = std::max<int64_t>(layers, l + 1);  // a per-layer key
    } else {
      layers = std::max(layers, t.shape[0]);  // a stacked key
    }
  }
  return layers;
}

}  // namespace

bool ReadInt(std::string_view s, size_t* pos, int* out) {
  const size_t begin = *pos;
  int64_t v = 0;
  while (*pos < s.size() && s[*pos] >= '0' && s[*pos] <= '9' && *pos - begin < 9) {
    v = v * 10 + (s[(*pos)++] - '0');
  }
  *out = static_cast<int>(v);
  return *pos > begin;
}

bool Expect(std::string_view s, size_t* pos, std::string_view lit) {
  if (s.substr(*pos, lit.size()) != lit) return false;
  *pos += lit.size();
  return true;
}

std::string Describe(const Manifest& m, const ParamRef& p) {
  const std::string& k = m.tensors[p.tensor].key;
  return (p.shadow ? "the last stage's copy of " : "") +
         (p.layer < 0 ? "'" + k + "'" : "'" + k + "' layer " + std::to_string(p.layer)) +
         (p.expert < 0 ? "" : " expert " + std::to_string(p.expert));
}

Order ParamOrder(const Manifest& m, bool grouped, bool dense_experts, std::string* why) {
  Order out;
  std::vector<bool> used(m.tensors.size(), false);
  auto add = [&](const std::string& key, int64_t layer, int64_t at) {
    const int64_t t = m.FindTensor(key);
    if (t < 0) return;
    out.params.push_back({static_cast<size_t>(t), layer, -1, at});
    used[t] = true;
  };
  for (const char* k : kBefore) add(k, -1, kFirstStage);
  out.layers = CountLayers(m);
  for (int64_t l = 0; l < out.layers; ++l) {
    for (const char* p : kLayerParams) {
      const std::string stacked = std::string(kLayers) + p;
      const int64_t t = m.FindTensor(stacked);
      if (t >= 0 && l < m.tensors[t].shape[0]) add(stacked, l, l);
      if (t < 0) add(std::string(kLayers) + std::to_string(l) + "." + p, -1, l);
      if (std::string_view(p) == kExpertsAfter) {  // the MoE layer's experts module
        AddExperts(m, l, grouped, &used, dense_experts ? &out.params : &out.experts);
      }
    }
    for (const char* b : kLayerBuffers) {
      for (const std::string& k :
           {std::string(kLayers) + b, std::string(kLayers) + std::to_string(l) + "." + b}) {
        if (const int64_t t = m.FindTensor(k); t >= 0) used[t] = true;
      }
    }
  }
  for (const char* k : kAfter) add(k, -1, kLastStage);
  for (size_t i = 0; i < m.tensors.size() && why->empty(); ++i) {
    if (!used[i] && !IsOptimizerKey(m.tensors[i].key)) {
      *why = "model tensor '" + m.tensors[i].key +
             "' is not a parameter of Megatron-Core's GPT model in the order shardpoint knows";
    }
  }
  return out;
}

Local LocalOf(const Manifest& m, const ParamRef& p, int tp, int tp_size, std::string* why) {
  const TensorRecord& t = m.tensors[p.tensor];
  std::vector<Box> c;  // the chunks' parts in the layer and expert (each chunk whole if none)
  int64_t covered = 0, whole = Box::Whole(t.shape).num_elements();
  for (const ChunkRecord& r : t.chunks) {
    Box b = r.box;
    bool in = true;
    for (const auto& [d, at] : {std::pair<size_t, int64_t>{0, p.layer}, {1, p.expert}}) {
      if (at < 0) continue;
      in = in && b.offset[d] <= at && at < b.offset[d] + b.shape[d];
      b.offset[d] = at;
      b.shape[d] = 1;
    }
    if (!in) continue;
    covered += b.num_elements();
    c.push_back(std::move(b));
  }
  if (p.layer >= 0) whole /= std::max<int64_t>(t.shape[0], 1);
  if (p.expert >= 0) whole /= std::max<int64_t>(t.shape[1], 1);
  Local out;
  const int n = static_cast<int>(c.size());
  if (covered == whole && n == 1) {
    out.pieces = {c[0]};
    out.replicated = true;
  } else if (covered == whole && n == tp_size) {
    out.pieces = {c[tp]};
  } else if (covered == whole && n == 2 * tp_size &&
             t.key.find("linear_fc1.") != std::string::npos) {
    out.pieces = {c[tp], c[tp_size + tp]};  // SwiGLU: [W_t; V_t]
  } else if (why->empty()) {
    *why = Describe(m, p) + " is stored in " + std::to_string(n) +
           " chunks (not 1, one per TP rank, or a SwiGLU weight's 2 per TP rank)";
  }
  for (const Box& b : out.pieces) out.numel += b.num_elements();
  return out;
}

std::vector<ParamRef> ChunkParams(const Manifest& m, const Order& order, const DpBucketArgs& args,
                                  const std::vector<LayerRange>& chunks, int pp, int v) {
  const bool first = pp == 0 && v == 0;
  const bool last = pp == args.pp_size - 1 && v == args.vpp_size - 1;
  const LayerRange& r = chunks[static_cast<size_t>(pp) * args.vpp_size + v];
  std::vector<ParamRef> out;
  for (const ParamRef& p : order.params) {
    if (p.at == kFirstStage ? first : p.at == kLastStage ? last : r.begin <= p.at && p.at < r.end) {
      out.push_back(p);
    }
  }
  const int64_t emb = m.FindTensor(kBefore[0]);
  if (args.tied && args.pp_size > 1 && last && emb >= 0 && m.FindTensor(kAfter[2]) < 0) {
    out.push_back({static_cast<size_t>(emb), -1, -1, kLastStage, true});
  }
  return out;
}

std::vector<ParamRef> ExpertChunkParams(const Manifest& m, const Order& order,
                                        const DpBucketArgs& args,
                                        const std::vector<LayerRange>& chunks, int g, int v,
                                        std::string* why) {
  const int etp = args.ExpertTp();
  const int64_t ep = (g / etp) % args.ep_size, pp = g / (etp * args.ep_size);
  const LayerRange& r = chunks[static_cast<size_t>(pp) * args.vpp_size + v];
  std::vector<ParamRef> out;
  for (const ParamRef& p : order.experts) {
    const int64_t experts = m.tensors[p.tensor].shape[1], n = experts / args.ep_size;
    if (experts % args.ep_size != 0 && why->empty()) {
      *why = "'" + m.tensors[p.tensor].key + "': " + std::to_string(experts) +
             " experts over expert_model_parallel_size " + std::to_string(args.ep_size);
    }
    if (r.begin <= p.at && p.at < r.end && p.expert / std::max<int64_t>(n, 1) == ep) {
      out.push_back(p);
    }
  }
  return out;
}

}  // namespace shardpoint::internal_dcp
