#include "src/dcp/dp_buckets.h"

#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string_view>

#include "src/dcp/metadata.h"
#include "src/geometry/flat_range.h"

using shardpoint::internal_format::ChunkRecord;
using shardpoint::internal_format::Manifest;
using shardpoint::internal_format::TensorRecord;
using shardpoint::internal_geometry::FlatRangeToBoxes;
using shardpoint::internal_geometry::RowMajorIndex;

namespace shardpoint::internal_dcp {
namespace {

constexpr std::string_view kBucketPrefix = "optimizer.distributed.dp_group_idx_";
constexpr std::string_view kLayers = "decoder.layers.";
constexpr int64_t kParamAlign = 64;  // param_layout.py's pad_param_start

// Megatron-Core's GPTModel parameters in `model.parameters()` order (the
// Transformer Engine and the local layer specs, no MoE): the embedding, each
// layer's modules as registered (Attention's linear_proj before
// SelfAttention's linear_qkv; a TE linear's fused norm before its weight),
// the final norm, the output layer. A model lacks most of these; the order of
// those it has is what matters.
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
    "mlp.linear_fc1.layer_norm_weight",
    "mlp.linear_fc1.layer_norm_bias",
    "mlp.linear_fc1.weight",
    "mlp.linear_fc1.bias",
    "mlp.linear_fc2.weight",
    "mlp.linear_fc2.bias",
};
// An MoE layer's experts (TEGroupedMLP's / SequentialMLP's), stacked
// [layers, experts, ...]: the expert optimizer's parameters.
constexpr const char* kExperts[] = {"mlp.experts.linear_fc1.weight",
                                    "mlp.experts.linear_fc2.weight"};
constexpr const char* kAfter[] = {"decoder.final_layernorm.weight", "decoder.final_layernorm.bias",
                                  "output_layer.weight"};

struct BucketKey {
  int chain = -1;  // a ChainedOptimizer's "chained_<i>." prefix (-1: none)
  int group = 0, buffer = 0, bucket = 0;
  std::string dtype;  // "(torch.bfloat16, torch.float32)" or "torch.float32"
  std::string state;
};

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

// "[chained_<i>.]<prefix><g>.gbuf_idx_<b>.dtype_<dt>.bucket_idx_<k>.<state>";
// <dt> holds dots ("(torch.bfloat16, torch.float32)", or "torch.float32"
// before 0.15).
std::optional<BucketKey> ParseBucketKey(std::string_view key) {
  BucketKey b;
  size_t pos = 0;
  if (Expect(key, &pos, "chained_") && !(ReadInt(key, &pos, &b.chain) && Expect(key, &pos, "."))) {
    return std::nullopt;
  }
  if (!Expect(key, &pos, kBucketPrefix) || !ReadInt(key, &pos, &b.group) ||
      !Expect(key, &pos, ".gbuf_idx_") || !ReadInt(key, &pos, &b.buffer) ||
      !Expect(key, &pos, ".dtype_")) {
    return std::nullopt;
  }
  const size_t k = key.rfind(".bucket_idx_");
  if (k == std::string_view::npos || k < pos) return std::nullopt;
  b.dtype = std::string(key.substr(pos, k - pos));
  pos = k;
  if (!Expect(key, &pos, ".bucket_idx_") || !ReadInt(key, &pos, &b.bucket) ||
      !Expect(key, &pos, ".") || pos == key.size()) {
    return std::nullopt;
  }
  b.state = std::string(key.substr(pos));
  return b;
}

// One gradient buffer of a data-parallel group: its parameters' dtype and
// its buckets (bucket -> state -> index in m.tensors).
struct Buffer {
  std::string dtype;
  std::map<int, std::map<std::string, size_t>> buckets;
};
// (optimizer, group) -> gbuf_idx -> buffer; the optimizer is kDense without
// a chained_ prefix.
using Groups = std::map<std::pair<int, int>, std::map<int, Buffer>>;

constexpr int64_t kFirstStage = -1, kLastStage = -2;  // ParamRef::at of non-layer parameters

struct ParamRef {
  size_t tensor = 0;         // the model key's index in m.tensors
  int64_t layer = -1;        // a layer of a stacked key; -1: the whole key
  int64_t expert = -1;       // an expert of a stacked experts key (its dim 1)
  int64_t at = kFirstStage;  // its decoder layer, or kFirstStage / kLastStage
  bool shadow = false;       // the last stage's copy of a tied embedding: placed, not emitted
};

constexpr int kDense = 0, kExpert = 1;  // the optimizers: chained_0, chained_1

// One TP rank's local tensor of a parameter: global boxes in its flat order.
struct Local {
  std::vector<Box> pieces;
  int64_t numel = 0;
  bool replicated = false;
};

std::string Describe(const Manifest& m, const ParamRef& p) {
  const std::string& k = m.tensors[p.tensor].key;
  return (p.shadow ? "the last stage's copy of " : "") +
         (p.layer < 0 ? "'" + k + "'" : "'" + k + "' layer " + std::to_string(p.layer)) +
         (p.expert < 0 ? "" : " expert " + std::to_string(p.expert));
}

// Sets *why unless `groups` (of one optimizer) are 0..n-1.
void CheckGroups(const Groups& b, int opt, int n, const std::string& what, std::string* why) {
  std::vector<int> got;
  for (const auto& [key, bufs] : b) {
    if (key.first == opt) got.push_back(key.second);
  }
  if (why->empty() &&
      (static_cast<int>(got.size()) != n || got.front() != 0 || got.back() != n - 1)) {
    *why = std::to_string(got.size()) + (opt == kExpert ? " expert" : "") +
           " data-parallel groups for " + what;
  }
}

// The bucket tensors of `m`. Sets *why when they are not of the layout
// derived here: one optimizer (groups 0..TP*PP-1), or chained_0 (dense) and
// chained_1 (an MoE model's experts: groups 0..EP*PP-1, expert TP 1).
Result<Groups> CollectBuckets(const DpBucketArgs& args, const Manifest& m, int* count,
                              std::string* why) {
  Groups b;
  std::set<int> chains;
  for (size_t i = 0; i < m.tensors.size(); ++i) {
    std::optional<BucketKey> k = ParseBucketKey(m.tensors[i].key);
    if (!k) continue;
    ++*count;
    if (m.tensors[i].shape.size() != 1) {
      return DataLossError("bucket '" + m.tensors[i].key + "' is not 1-D (" +
                           ShapeToString(m.tensors[i].shape) + ")");
    }
    chains.insert(k->chain);
    Buffer& buf = b[std::make_pair(std::max(k->chain, kDense), k->group)][k->buffer];
    if (!buf.dtype.empty() && buf.dtype != k->dtype) {
      return DataLossError("bucket '" + m.tensors[i].key + "': buffer " +
                           std::to_string(k->buffer) + " has buckets of dtype " + buf.dtype +
                           " too");
    }
    buf.dtype = k->dtype;
    buf.buckets[k->bucket][k->state] = i;
  }
  if (b.empty()) return b;
  const int etp = args.etp_size < 0 ? args.tp_size : args.etp_size;
  const std::string pp = " x pipeline_model_parallel_size " + std::to_string(args.pp_size);
  if (chains != std::set<int>{-1} && chains != std::set<int>{0, 1}) {
    *why =
        "chained optimizers' buckets (prefixes chained_0. and chained_1., a dense and an MoE "
        "model's expert optimizer, are derived; not these, or keys with and without one)";
  } else if (args.tp_size <= 0) {
    *why = "common.pt's args give no tensor_model_parallel_size";
  } else if (!args.not_derived.empty()) {
    *why = args.not_derived;
  } else if (chains.count(1) && etp != 1) {
    *why = "expert_tensor_parallel_size " + std::to_string(etp) +
           " (experts split over tensor parallelism are not derived)";
  }
  CheckGroups(b, kDense, args.tp_size * args.pp_size,
              "tensor_model_parallel_size " + std::to_string(args.tp_size) + pp, why);
  if (chains.count(1)) {
    CheckGroups(b, kExpert, args.ep_size * args.pp_size,
                "expert_model_parallel_size " + std::to_string(args.ep_size) + pp, why);
  }
  return b;
}

// Each buffer's buckets 0..K-1 all hold the same states, each state of a
// bucket the same size. Returns the sizes.
Result<std::vector<int64_t>> BucketSizes(const Manifest& m, int group, const Buffer& buf) {
  std::vector<int64_t> sizes;
  const std::map<std::string, size_t>& first = buf.buckets.begin()->second;
  for (const auto& [k, states] : buf.buckets) {
    const std::string& key = m.tensors[states.begin()->second].key;
    if (k != static_cast<int>(sizes.size())) {
      return DataLossError("bucket '" + key + "': data-parallel group " + std::to_string(group) +
                           " has no bucket_idx_" + std::to_string(sizes.size()));
    }
    bool same = states.size() == first.size();
    for (const auto& [s, i] : states) {
      same =
          same && first.count(s) && m.tensors[i].shape == m.tensors[states.begin()->second].shape;
    }
    if (!same) {
      return DataLossError("bucket '" + key +
                           "': its states differ from bucket 0's in name or size");
    }
    sizes.push_back(m.tensors[states.begin()->second].shape[0]);
  }
  return sizes;
}

struct Order {
  std::vector<ParamRef> params;   // the dense optimizer's
  std::vector<ParamRef> experts;  // the expert optimizer's
  int64_t layers = 0;             // decoder layers the checkpoint holds
};

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

// The model's parameters in `model.parameters()` order, from the model
// tensors (every tensor not under "optimizer."). Sets *why if one is not in
// the order known here.
Order ParamOrder(const Manifest& m, bool grouped, std::string* why) {
  Order out;
  std::vector<bool> used(m.tensors.size(), false);
  auto add = [&](const std::string& key, int64_t layer, int64_t at) {
    const int64_t t = m.FindTensor(key);
    if (t < 0) return;
    out.params.push_back({static_cast<size_t>(t), layer, -1, at});
    used[t] = true;
  };
  for (const char* k : kBefore) add(k, -1, kFirstStage);
  for (const TensorRecord& t : m.tensors) {
    if (t.key.rfind(kLayers, 0) != 0 || t.shape.empty()) continue;
    size_t pos = kLayers.size();
    int l = 0;
    if (ReadInt(t.key, &pos, &l) && Expect(t.key, &pos, ".")) {
      out.layers = std::max<int64_t>(out.layers, l + 1);  // a per-layer key
    } else {
      out.layers = std::max(out.layers, t.shape[0]);  // a stacked key
    }
  }
  for (int64_t l = 0; l < out.layers; ++l) {
    for (const char* p : kLayerParams) {
      const std::string stacked = std::string(kLayers) + p;
      const int64_t t = m.FindTensor(stacked);
      if (t >= 0 && l < m.tensors[t].shape[0]) add(stacked, l, l);
      if (t < 0) add(std::string(kLayers) + std::to_string(l) + "." + p, -1, l);
    }
    AddExperts(m, l, grouped, &used, &out.experts);
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

// TP rank `tp`'s local tensor of parameter `p`; sets *why if the key's
// chunks are not one TP shard per rank.
Local LocalOf(const Manifest& m, const ParamRef& p, int tp, int tp_size, std::string* why) {
  const TensorRecord& t = m.tensors[p.tensor];
  if (p.expert >= 0) {  // expert TP 1: the whole expert of the layer
    Box b = Box::Whole(t.shape);
    b.offset[0] = p.layer, b.offset[1] = p.expert;
    b.shape[0] = b.shape[1] = 1;
    return {{b}, b.num_elements(), false};
  }
  std::vector<Box> c;  // the chunks' parts in the layer (each chunk whole if no layer)
  int64_t covered = 0;
  for (const ChunkRecord& r : t.chunks) {
    Box b = r.box;
    if (p.layer >= 0) {
      if (b.offset[0] > p.layer || b.offset[0] + b.shape[0] <= p.layer) continue;
      b.offset[0] = p.layer;
      b.shape[0] = 1;
    }
    covered += b.num_elements();
    c.push_back(std::move(b));
  }
  Local out;
  const int64_t whole =
      Box::Whole(t.shape).num_elements() / (p.layer >= 0 ? std::max<int64_t>(t.shape[0], 1) : 1);
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

// Pipeline stage `pp`'s parameters in model order: the embedding on the
// first stage; layers [bounds[pp], bounds[pp + 1]); the final norm and the
// output layer on the last, where a tied embedding (no output_layer.weight
// stored) is a copy of the embedding's, in its buffer but not stored.
std::vector<ParamRef> StageParams(const Manifest& m, const Order& order, const DpBucketArgs& args,
                                  const std::vector<int64_t>& bounds, int pp) {
  std::vector<ParamRef> out;
  for (const ParamRef& p : order.params) {
    if (p.at == kFirstStage  ? pp == 0
        : p.at == kLastStage ? pp == args.pp_size - 1
                             : bounds[pp] <= p.at && p.at < bounds[pp + 1]) {
      out.push_back(p);
    }
  }
  const int64_t emb = m.FindTensor(kBefore[0]);
  if (args.tied && args.pp_size > 1 && pp == args.pp_size - 1 && emb >= 0 &&
      m.FindTensor(kAfter[2]) < 0) {
    out.push_back({static_cast<size_t>(emb), -1, -1, kLastStage, true});
  }
  return out;
}

// Expert data-parallel group g's parameters: EP rank g % EP's experts of
// the layers of pipeline stage g / EP (expert TP 1).
std::vector<ParamRef> ExpertParams(const Manifest& m, const Order& order, const DpBucketArgs& args,
                                   const std::vector<int64_t>& bounds, int g, std::string* why) {
  std::vector<ParamRef> out;
  const int64_t ep = g % args.ep_size, pp = g / args.ep_size;
  for (const ParamRef& p : order.experts) {
    const int64_t experts = m.tensors[p.tensor].shape[1], n = experts / args.ep_size;
    if (experts % args.ep_size != 0 && why->empty()) {
      *why = "'" + m.tensors[p.tensor].key + "': " + std::to_string(experts) +
             " experts over expert_model_parallel_size " + std::to_string(args.ep_size);
    }
    if (bounds[pp] <= p.at && p.at < bounds[pp + 1] && p.expert / std::max<int64_t>(n, 1) == ep) {
      out.push_back(p);
    }
  }
  return out;
}

struct Placed {
  size_t param = 0;  // index into the order
  int bucket = 0;
  int64_t start = 0;  // in the bucket
};

// Megatron's walk over the buffer: parameters in reverse order, each at a
// multiple of 64; a bucket ends at its stored size.
Result<std::vector<Placed>> Place(const Manifest& m, const std::vector<ParamRef>& order,
                                  const std::vector<Local>& locals,
                                  const std::vector<int64_t>& sizes,
                                  const std::function<std::string(int)>& name) {
  std::vector<Placed> out;
  int k = 0;
  int64_t pos = 0;
  for (size_t i = order.size(); i-- > 0;) {
    int64_t s = (pos + kParamAlign - 1) / kParamAlign * kParamAlign;
    if (pos > 0 && (pos == sizes[k] || s == sizes[k])) {  // the bucket ended
      if (++k == static_cast<int>(sizes.size())) {
        return DataLossError("bucket '" + name(k - 1) + "' is the last, but " +
                             Describe(m, order[i]) + " and " + std::to_string(i) +
                             " more parameters follow: the buffer's ranges do not tile");
      }
      pos = s = 0;
    }
    const int64_t end = s + locals[i].numel;
    if (end > sizes[k]) {
      return DataLossError("bucket '" + name(k) + "' of " + std::to_string(sizes[k]) +
                           " elements: " + Describe(m, order[i]) + " would occupy [" +
                           std::to_string(s) + ", " + std::to_string(end) +
                           "): the buffer's ranges do not tile");
    }
    out.push_back({i, k, s});
    pos = end;
  }
  if (k + 1 != static_cast<int>(sizes.size()) || pos != sizes[k]) {
    return DataLossError("bucket '" + name(k) + "' of " + std::to_string(sizes[k]) +
                         " elements: the parameters end at " + std::to_string(pos) +
                         (k + 1 < static_cast<int>(sizes.size()) ? ", and buckets follow" : "") +
                         ": the buffer's ranges do not tile");
  }
  return out;
}

// The chunks of `out` for one placed parameter's state, from bucket `b`.
Status EmitChunks(const TensorRecord& b, const Local& local, int64_t start, const std::string& what,
                  TensorRecord* out) {
  const uint64_t es = DTypeSize(b.dtype);
  int64_t covered = 0;
  for (const ChunkRecord& c : b.chunks) {
    const int64_t cs = c.box.offset[0], ce = cs + c.box.shape[0];
    int64_t po = 0;  // the piece's first element in the parameter's flat order
    for (const Box& piece : local.pieces) {
      const int64_t pn = piece.num_elements();
      const int64_t x = std::max(cs - start, po), y = std::min(ce - start, po + pn);
      for (const Box& q :
           x < y ? FlatRangeToBoxes(piece.shape, x - po, y - po) : std::vector<Box>{}) {
        ChunkRecord r;
        r.box = q;
        for (size_t d = 0; d < q.rank(); ++d) r.box.offset[d] += piece.offset[d];
        r.file = c.file;
        r.offset =
            c.offset +
            static_cast<uint64_t>(start + po + RowMajorIndex(piece.shape, q.offset) - cs) * es;
        r.nbytes = static_cast<uint64_t>(q.num_elements()) * es;
        covered += q.num_elements();
        out->chunks.push_back(std::move(r));
      }
      po += pn;
    }
  }
  if (covered != local.numel) {
    return DataLossError("bucket '" + b.key + "': " + what + " at [" + std::to_string(start) +
                         ", " + std::to_string(start + local.numel) + ") is not wholly stored (" +
                         std::to_string(covered) + " of " + std::to_string(local.numel) +
                         " elements)");
  }
  return OkStatus();
}

// One buffer's parameters placed in its buckets, each state emitted into
// `out` (keyed by the new tensor's key). Replicated parameters are taken
// from TP rank 0 only (every TP rank's buffer holds them alike), a tied
// embedding's last-stage copy from the first stage.
Status RebuildBuffer(const Manifest& m, const std::vector<ParamRef>& order, int group, int tp,
                     const Buffer& buf, const std::vector<Local>& locals,
                     std::map<std::string, TensorRecord>* out) {
  SP_ASSIGN_OR_RETURN(std::vector<int64_t> sizes, BucketSizes(m, group, buf));
  auto name = [&](int k) { return m.tensors[buf.buckets.at(k).begin()->second].key; };
  SP_ASSIGN_OR_RETURN(std::vector<Placed> placed, Place(m, order, locals, sizes, name));
  for (const Placed& p : placed) {
    const Local& local = locals[p.param];
    if ((local.replicated && tp != 0) || order[p.param].shadow) continue;
    const TensorRecord& param = m.tensors[order[p.param].tensor];
    for (const auto& [state, i] : buf.buckets.at(p.bucket)) {
      const TensorRecord& b = m.tensors[i];
      TensorRecord& t = (*out)["optimizer.state." + state + "." + param.key];
      if (t.key.empty()) {
        t.key = "optimizer.state." + state + "." + param.key;
        t.dtype = b.dtype;
        t.shape = param.shape;
      } else if (t.dtype != b.dtype) {
        return DataLossError("bucket '" + b.key + "' is " + std::string(DTypeName(b.dtype)) +
                             ", another bucket holding '" + t.key + "' " +
                             std::string(DTypeName(t.dtype)));
      }
      SP_RETURN_IF_ERROR(EmitChunks(b, local, p.start, Describe(m, order[p.param]), &t));
    }
  }
  return OkStatus();
}

// The parameter dtype of a buffer's key part: "(torch.bfloat16,
// torch.float32)" (param, grad) or, before Megatron-Core 0.15, "torch.float32".
std::optional<DType> BufferParamDType(const std::string& dt) {
  std::string_view n = dt;
  if (n.starts_with("("))
    n = n.substr(1, n.find(',') == std::string_view::npos ? 0 : n.find(',') - 1);
  Result<DType> d = DTypeFromTorchName(n);
  return d.ok() ? std::optional<DType>(*d) : std::nullopt;
}

// Data-parallel group g's buffers, each with its stage's parameters of the
// buffer's dtype (in model order) and their TP-local tensors; sets *why
// where a parameter is in no buffer, or a buffer's dtype is not known.
std::vector<std::pair<std::vector<ParamRef>, std::vector<Local>>> GroupBuffers(
    const Manifest& m, const std::vector<ParamRef>& stage, int g, int tp,
    const std::map<int, Buffer>& bufs, const DpBucketArgs& args, std::string* why) {
  std::vector<std::pair<std::vector<ParamRef>, std::vector<Local>>> out;
  std::vector<bool> placed(stage.size(), false);
  for (const auto& [b, buf] : bufs) {
    std::optional<DType> dt = BufferParamDType(buf.dtype);
    if (!dt) {
      *why = "gradient buffer " + std::to_string(b) + " of data-parallel group " +
             std::to_string(g) + " holds parameters of dtype '" + buf.dtype +
             "', which no model tensor is stored as";
      return {};
    }
    auto& [params, locals] = out.emplace_back();
    for (size_t i = 0; i < stage.size(); ++i) {
      if (m.tensors[stage[i].tensor].dtype != *dt) continue;
      placed[i] = true;
      params.push_back(stage[i]);
      locals.push_back(LocalOf(m, stage[i], tp, args.tp_size, why));
    }
  }
  for (size_t i = 0; i < stage.size() && why->empty(); ++i) {
    if (!placed[i]) {
      *why = Describe(m, stage[i]) + " (" +
             std::string(DTypeName(m.tensors[stage[i].tensor].dtype)) +
             ") is in no gradient buffer of data-parallel group " + std::to_string(g);
    }
  }
  return out;
}

// Each group's buffers with their parameters (per_group, in `groups`'
// order), or the reason they are not derived.
std::string PlanGroups(
    const Manifest& m, const DpBucketArgs& args, const Groups& groups,
    std::vector<std::vector<std::pair<std::vector<ParamRef>, std::vector<Local>>>>* per_group) {
  std::string why;
  const Order order = ParamOrder(m, args.grouped_gemm, &why);
  if (args.num_layers >= 0 && args.num_layers != order.layers && why.empty()) {
    why = "args.num_layers " + std::to_string(args.num_layers) + ", but the checkpoint holds " +
          std::to_string(order.layers) + " layers";
  }
  if (why.empty() && !order.experts.empty() && groups.rbegin()->first.first != kExpert) {
    why =
        "expert parameters, but no chained_1. buckets (the expert optimizer's): experts in "
        "the dense buffers (expert_model_parallel_size 1 and expert TP = TP) are not derived";
  } else if (why.empty() && order.experts.empty() && groups.rbegin()->first.first == kExpert) {
    why =
        "chained_1. buckets but no expert parameters (a dense model's optimizer split in two, "
        "as overlap_param_gather_with_optimizer_step does, is not derived)";
  }
  const std::vector<int64_t> bounds =
      why.empty() ? StageBounds(args, order.layers, &why) : std::vector<int64_t>{};
  for (const auto& [key, bufs] : groups) {
    if (!why.empty()) break;
    const auto [opt, g] = key;
    const std::vector<ParamRef> params = opt == kDense
                                             ? StageParams(m, order, args, bounds, g / args.tp_size)
                                             : ExpertParams(m, order, args, bounds, g, &why);
    per_group->push_back(
        GroupBuffers(m, params, g, opt == kDense ? g % args.tp_size : 0, bufs, args, &why));
  }
  return why;
}

}  // namespace

Result<DpBucketRebuild> RebuildDpBuckets(const DpBucketArgs& args, Manifest* m) {
  DpBucketRebuild r;
  SP_ASSIGN_OR_RETURN(Groups groups, CollectBuckets(args, *m, &r.buckets, &r.not_rebuilt));
  if (groups.empty() || !r.not_rebuilt.empty()) return r;
  std::vector<std::vector<std::pair<std::vector<ParamRef>, std::vector<Local>>>> per_group;
  r.not_rebuilt = PlanGroups(*m, args, groups, &per_group);
  if (!r.not_rebuilt.empty()) return r;
  std::map<std::string, TensorRecord> out;
  size_t gi = 0;
  for (const auto& [key, bufs] : groups) {
    size_t bi = 0;
    const int tp = key.first == kDense ? key.second % args.tp_size : 0;
    for (const auto& [b, buf] : bufs) {
      const auto& [params, locals] = per_group[gi][bi++];
      SP_RETURN_IF_ERROR(RebuildBuffer(*m, params, key.second, tp, buf, locals, &out));
    }
    ++gi;
  }
  for (const auto& [key, t] : out) {
    if (m->FindTensor(key) >= 0) {
      r.not_rebuilt = "'" + key + "' is stored as well (two layouts of one state)";
      return r;
    }
  }
  for (auto& [key, t] : out) {
    std::sort(t.chunks.begin(), t.chunks.end(),
              [](const ChunkRecord& a, const ChunkRecord& b) { return a.box < b.box; });
    m->tensors.push_back(std::move(t));
    ++r.params;
  }
  std::sort(m->tensors.begin(), m->tensors.end(),
            [](const TensorRecord& a, const TensorRecord& b) { return a.key < b.key; });
  return r;
}

}  // namespace shardpoint::internal_dcp
