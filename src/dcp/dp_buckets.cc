#include "src/dcp/dp_buckets.h"

#include <algorithm>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>

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
    "mlp.linear_fc1.layer_norm_weight",
    "mlp.linear_fc1.layer_norm_bias",
    "mlp.linear_fc1.weight",
    "mlp.linear_fc1.bias",
    "mlp.linear_fc2.weight",
    "mlp.linear_fc2.bias",
};
constexpr const char* kAfter[] = {"decoder.final_layernorm.weight", "decoder.final_layernorm.bias",
                                  "output_layer.weight"};

struct BucketKey {
  int group = 0, buffer = 0, bucket = 0;
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

// "<prefix><g>.gbuf_idx_<b>.dtype_<dt>.bucket_idx_<k>.<state>"; <dt> holds
// dots ("(torch.bfloat16, torch.float32)", or "torch.float32" before 0.15).
std::optional<BucketKey> ParseBucketKey(std::string_view key) {
  BucketKey b;
  size_t pos = 0;
  if (!Expect(key, &pos, kBucketPrefix) || !ReadInt(key, &pos, &b.group) ||
      !Expect(key, &pos, ".gbuf_idx_") || !ReadInt(key, &pos, &b.buffer) ||
      !Expect(key, &pos, ".dtype_")) {
    return std::nullopt;
  }
  const size_t k = key.rfind(".bucket_idx_");
  if (k == std::string_view::npos || k < pos) return std::nullopt;
  pos = k;
  if (!Expect(key, &pos, ".bucket_idx_") || !ReadInt(key, &pos, &b.bucket) ||
      !Expect(key, &pos, ".") || pos == key.size()) {
    return std::nullopt;
  }
  b.state = std::string(key.substr(pos));
  return b;
}

// group -> bucket -> state -> index in m.tensors
using Buckets = std::map<int, std::map<int, std::map<std::string, size_t>>>;

struct ParamRef {
  size_t tensor = 0;   // the model key's index in m.tensors
  int64_t layer = -1;  // a layer of a stacked key; -1: the whole key
};

// One TP rank's local tensor of a parameter: global boxes in its flat order.
struct Local {
  std::vector<Box> pieces;
  int64_t numel = 0;
  bool replicated = false;
};

std::string Describe(const Manifest& m, const ParamRef& p) {
  const std::string& k = m.tensors[p.tensor].key;
  return p.layer < 0 ? "'" + k + "'" : "'" + k + "' layer " + std::to_string(p.layer);
}

// The bucket tensors of `m`. Sets *why when they are not of the one layout
// derived here (PP = 1, one buffer, groups 0..TP-1).
Result<Buckets> CollectBuckets(const DpBucketArgs& args, const Manifest& m, int* count,
                               std::string* why) {
  Buckets b;
  for (size_t i = 0; i < m.tensors.size(); ++i) {
    std::optional<BucketKey> k = ParseBucketKey(m.tensors[i].key);
    if (!k) continue;
    ++*count;
    if (m.tensors[i].shape.size() != 1) {
      return DataLossError("bucket '" + m.tensors[i].key + "' is not 1-D (" +
                           ShapeToString(m.tensors[i].shape) + ")");
    }
    if (k->buffer != 0 && why->empty()) {
      *why = "several gradient buffers ('" + m.tensors[i].key +
             "': MoE expert parameters and parameters of another dtype have buffers of their "
             "own, whose parameter order is not derived)";
    }
    b[k->group][k->bucket][k->state] = i;
  }
  if (b.empty() || !why->empty()) return b;
  if (args.tp_size <= 0) {
    *why = "common.pt's args give no tensor_model_parallel_size";
  } else if (args.pp_size != 1) {
    *why = "pipeline_model_parallel_size " + std::to_string(args.pp_size) +
           " (which layers each stage's buffer holds, and which data-parallel group is which "
           "stage, is not derived)";
  } else if (static_cast<int>(b.size()) != args.tp_size || b.begin()->first != 0 ||
             b.rbegin()->first != args.tp_size - 1) {
    *why = std::to_string(b.size()) + " data-parallel groups for tensor_model_parallel_size " +
           std::to_string(args.tp_size);
  }
  return b;
}

// Each group's buckets 0..K-1 all hold the same states, each state of a
// bucket the same size. Returns the sizes.
Result<std::vector<int64_t>> BucketSizes(const Manifest& m, int group,
                                         const std::map<int, std::map<std::string, size_t>>& g) {
  std::vector<int64_t> sizes;
  const std::map<std::string, size_t>& first = g.begin()->second;
  for (const auto& [k, states] : g) {
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

// The model's parameters in `model.parameters()` order, from the model
// tensors (every tensor not under "optimizer."). Sets *why if one is not in
// the order known here.
std::vector<ParamRef> ParamOrder(const Manifest& m, std::string* why) {
  std::vector<ParamRef> out;
  std::vector<bool> used(m.tensors.size(), false);
  auto add = [&](const std::string& key, int64_t layer) {
    const int64_t t = m.FindTensor(key);
    if (t < 0) return;
    out.push_back({static_cast<size_t>(t), layer});
    used[t] = true;
  };
  for (const char* k : kBefore) add(k, -1);
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
  for (int64_t l = 0; l < layers; ++l) {
    for (const char* p : kLayerParams) {
      const std::string stacked = std::string(kLayers) + p;
      const int64_t t = m.FindTensor(stacked);
      if (t >= 0 && l < m.tensors[t].shape[0]) add(stacked, l);
      if (t < 0) add(std::string(kLayers) + std::to_string(l) + "." + p, -1);
    }
  }
  for (const char* k : kAfter) add(k, -1);
  for (size_t i = 0; i < m.tensors.size() && why->empty(); ++i) {
    if (!used[i] && m.tensors[i].key.rfind("optimizer.", 0) != 0) {
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

// One group's parameters placed in its buckets, each state emitted into
// `out` (keyed by the new tensor's key). Replicated parameters are taken
// from group 0 only (every group holds them alike).
Status RebuildGroup(const Manifest& m, const std::vector<ParamRef>& order, int group,
                    const std::map<int, std::map<std::string, size_t>>& buckets,
                    const std::vector<Local>& locals, std::map<std::string, TensorRecord>* out) {
  SP_ASSIGN_OR_RETURN(std::vector<int64_t> sizes, BucketSizes(m, group, buckets));
  auto name = [&](int k) { return m.tensors[buckets.at(k).begin()->second].key; };
  SP_ASSIGN_OR_RETURN(std::vector<Placed> placed, Place(m, order, locals, sizes, name));
  for (const Placed& p : placed) {
    const Local& local = locals[p.param];
    if (local.replicated && group != 0) continue;
    const TensorRecord& param = m.tensors[order[p.param].tensor];
    for (const auto& [state, i] : buckets.at(p.bucket)) {
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

}  // namespace

DpBucketArgs DpBucketArgsFromCommon(const std::string& common_json) {
  DpBucketArgs a;
  nlohmann::json c = nlohmann::json::parse(common_json, nullptr, false);
  if (c.is_discarded() || !c.is_object()) return a;
  auto args = c.find("args");
  if (args == c.end() || !args->is_object() || !args->contains("state")) return a;
  const nlohmann::json& st = (*args)["state"];
  if (!st.is_object()) return a;
  auto get = [&](const char* k, int dflt) {
    auto it = st.find(k);
    return it != st.end() && it->is_number_integer() ? it->get<int>() : dflt;
  };
  a.tp_size = get("tensor_model_parallel_size", 0);
  a.pp_size = get("pipeline_model_parallel_size", 1);
  return a;
}

Result<DpBucketRebuild> RebuildDpBuckets(const DpBucketArgs& args, Manifest* m) {
  DpBucketRebuild r;
  SP_ASSIGN_OR_RETURN(Buckets buckets, CollectBuckets(args, *m, &r.buckets, &r.not_rebuilt));
  if (buckets.empty() || !r.not_rebuilt.empty()) return r;
  std::vector<ParamRef> order = ParamOrder(*m, &r.not_rebuilt);
  std::vector<std::vector<Local>> locals(args.tp_size);
  for (int g = 0; g < args.tp_size && r.not_rebuilt.empty(); ++g) {
    for (const ParamRef& p : order)
      locals[g].push_back(LocalOf(*m, p, g, args.tp_size, &r.not_rebuilt));
  }
  if (!r.not_rebuilt.empty()) return r;
  std::map<std::string, TensorRecord> out;
  for (const auto& [g, b] : buckets) {
    SP_RETURN_IF_ERROR(RebuildGroup(*m, order, g, b, locals[g], &out));
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
