#include "src/dcp/dp_buckets.h"

#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string_view>

#include "src/dcp/dp_param_order.h"
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
constexpr int64_t kParamAlign = 64;  // param_layout.py's pad_param_start

struct BucketKey {
  int chain = -1;  // a ChainedOptimizer's "chained_<i>." prefix (-1: none)
  int group = 0, buffer = 0, bucket = 0;
  std::string dtype;  // "(torch.bfloat16, torch.float32)" or "torch.float32"
  std::string state;
};

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

constexpr int kDense = 0, kExpert = 1;  // the optimizers: chained_0, chained_1

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
// chained_1 (an MoE model's experts: groups 0..ETP*EP*PP-1).
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
  const int etp = args.ExpertTp();
  const std::string pp = " x pipeline_model_parallel_size " + std::to_string(args.pp_size);
  if (chains != std::set<int>{-1} && chains != std::set<int>{0, 1}) {
    *why =
        "chained optimizers' buckets (prefixes chained_0. and chained_1., a dense and an MoE "
        "model's expert optimizer, are derived; not these, or keys with and without one)";
  } else if (args.tp_size <= 0) {
    *why = "common.pt's args give no tensor_model_parallel_size";
  } else if (!args.not_derived.empty()) {
    *why = args.not_derived;
  } else if (chains.count(1) && etp < 1) {
    *why = "expert_tensor_parallel_size " + std::to_string(etp);
  }
  CheckGroups(b, kDense, args.tp_size * args.pp_size,
              "tensor_model_parallel_size " + std::to_string(args.tp_size) + pp, why);
  if (chains.count(1)) {
    CheckGroups(b, kExpert, etp * args.ep_size * args.pp_size,
                "expert_tensor_parallel_size " + std::to_string(etp) +
                    " x expert_model_parallel_size " + std::to_string(args.ep_size) + pp,
                why);
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

// One gradient buffer's parameters (in model order) and their TP-local tensors.
struct Planned {
  std::vector<ParamRef> params;
  std::vector<Local> locals;
};
// A data-parallel group's TP rank (an expert group's: expert TP rank) and
// buffers, in gbuf_idx order.
struct GroupPlan {
  int tp = 0;
  std::vector<Planned> buffers;
};

// Each model chunk's parameters (in model order) split by dtype, a buffer
// per dtype in the order of its first parameter, chunk 0's buffers first.
std::vector<std::pair<DType, std::vector<ParamRef>>> ChunkBuffers(
    const Manifest& m, const std::vector<std::vector<ParamRef>>& chunks) {
  std::vector<std::pair<DType, std::vector<ParamRef>>> out;
  for (const std::vector<ParamRef>& chunk : chunks) {
    const size_t first = out.size();
    for (const ParamRef& p : chunk) {
      const DType dt = m.tensors[p.tensor].dtype;
      auto it = std::find_if(out.begin() + static_cast<std::ptrdiff_t>(first), out.end(),
                             [&](const auto& b) { return b.first == dt; });
      if (it == out.end()) {
        out.push_back({dt, {p}});
      } else {
        it->second.push_back(p);
      }
    }
  }
  return out;
}

// Data-parallel group g's stored buffers matched with its model chunks'
// (ChunkBuffers), with the TP-local tensors (TP rank `tp` of `tp_size`);
// sets *why where a stored buffer's dtype is not the one its index gives,
// or a parameter is in no buffer.
std::vector<Planned> GroupBuffers(const Manifest& m,
                                  const std::vector<std::vector<ParamRef>>& chunks, int g, int tp,
                                  int tp_size, const std::map<int, Buffer>& bufs,
                                  std::string* why) {
  const auto want = ChunkBuffers(m, chunks);
  const std::string group = "data-parallel group " + std::to_string(g);
  std::vector<Planned> out;
  for (const auto& [b, buf] : bufs) {
    std::optional<DType> dt = BufferParamDType(buf.dtype);
    if (!dt) {
      *why = "gradient buffer " + std::to_string(b) + " of " + group +
             " holds parameters of dtype '" + buf.dtype + "', which no model tensor is stored as";
      return {};
    }
    const size_t i = static_cast<size_t>(b);
    if (i != out.size() || i >= want.size() || want[i].first != *dt) {
      *why = "gradient buffer " + std::to_string(b) + " of " + group + " holds " +
             std::string(DTypeName(*dt)) + " parameters, but its model chunks' parameters " +
             (i < want.size() && i == out.size()
                  ? "make buffer " + std::to_string(b) + " " + std::string(DTypeName(want[i].first))
                  : "make " + std::to_string(want.size()) + " buffers");
      return {};
    }
    Planned& p = out.emplace_back();
    p.params = want[i].second;
    for (const ParamRef& r : p.params) p.locals.push_back(LocalOf(m, r, tp, tp_size, why));
  }
  if (why->empty() && out.size() < want.size()) {
    *why = Describe(m, want[out.size()].second[0]) + " (" +
           std::string(DTypeName(want[out.size()].first)) + ") is in no gradient buffer of " +
           group;
  }
  return out;
}

// Sets *why unless the MoE parts of the model and the optimizers agree:
// experts in the dense buffers (no chained_1.) only where Megatron puts them
// there (EP 1 and expert TP = TP: their gradients all-reduce as the rest's).
void CheckOptimizers(const DpBucketArgs& args, const Order& order, const Groups& groups,
                     std::string* why) {
  if (!why->empty()) return;
  const bool dense = groups.rbegin()->first.first != kExpert;
  const bool has_experts =
      !order.experts.empty() || std::any_of(order.params.begin(), order.params.end(),
                                            [](const ParamRef& p) { return p.expert >= 0; });
  if (has_experts && dense && (args.ep_size != 1 || args.ExpertTp() != args.tp_size)) {
    *why =
        "expert parameters but no chained_1. buckets (the expert optimizer's), with "
        "expert_model_parallel_size " +
        std::to_string(args.ep_size) + " and expert_tensor_parallel_size " +
        std::to_string(args.ExpertTp()) +
        " (Megatron keeps experts in the dense buffers only with EP 1 and expert TP = TP)";
  } else if (!has_experts && !dense) {
    *why =
        "chained_1. buckets but no expert parameters (a dense model's optimizer split in two, "
        "as overlap_param_gather_with_optimizer_step does, is not derived)";
  }
}

// Each group's TP rank and buffers with their parameters (per_group, in
// `groups`' order), or the reason they are not derived.
std::string PlanGroups(const Manifest& m, const DpBucketArgs& args, const Groups& groups,
                       std::vector<GroupPlan>* per_group) {
  std::string why;
  const Order order =
      ParamOrder(m, args.grouped_gemm, groups.rbegin()->first.first != kExpert, &why);
  if (args.num_layers >= 0 && args.num_layers != order.layers && why.empty()) {
    why = "args.num_layers " + std::to_string(args.num_layers) + ", but the checkpoint holds " +
          std::to_string(order.layers) + " layers";
  }
  CheckOptimizers(args, order, groups, &why);
  const std::vector<LayerRange> chunks =
      why.empty() ? ChunkLayers(args, order.layers, &why) : std::vector<LayerRange>{};
  for (const auto& [key, bufs] : groups) {
    if (!why.empty()) break;
    const auto [opt, g] = key;
    const int tp_size = opt == kDense ? args.tp_size : args.ExpertTp();
    std::vector<std::vector<ParamRef>> params;
    for (int v = 0; v < args.vpp_size; ++v) {
      params.push_back(opt == kDense ? ChunkParams(m, order, args, chunks, g / args.tp_size, v)
                                     : ExpertChunkParams(m, order, args, chunks, g, v, &why));
    }
    GroupPlan& plan = per_group->emplace_back();
    plan.tp = g % tp_size;
    plan.buffers = GroupBuffers(m, params, g, plan.tp, tp_size, bufs, &why);
  }
  return why;
}

}  // namespace

Result<DpBucketRebuild> RebuildDpBuckets(const DpBucketArgs& args, Manifest* m) {
  DpBucketRebuild r;
  SP_ASSIGN_OR_RETURN(Groups groups, CollectBuckets(args, *m, &r.buckets, &r.not_rebuilt));
  if (groups.empty() || !r.not_rebuilt.empty()) return r;
  std::vector<GroupPlan> per_group;
  r.not_rebuilt = PlanGroups(*m, args, groups, &per_group);
  if (!r.not_rebuilt.empty()) return r;
  std::map<std::string, TensorRecord> out;
  size_t gi = 0;
  for (const auto& [key, bufs] : groups) {
    size_t bi = 0;
    const GroupPlan& plan = per_group[gi++];
    for (const auto& [b, buf] : bufs) {
      const Planned& p = plan.buffers[bi++];
      SP_RETURN_IF_ERROR(RebuildBuffer(*m, p.params, key.second, plan.tp, buf, p.locals, &out));
    }
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
