// Megatron-style layouts: TP column/row, vocab padding, PP layer numbering
// with virtual stages, EP experts (per-expert keys and stacked).
#include <algorithm>
#include <numeric>
#include <string>
#include <utility>

#include "shardpoint/layout.h"
#include "shardpoint/layout_megatron.h"

namespace shardpoint {
namespace {

Status CheckTp(const std::string& key, int tp_rank, int tp_size) {
  if (tp_size <= 0 || tp_rank < 0 || tp_rank >= tp_size) {
    return InvalidArgumentError("'" + key + "': TP rank " + std::to_string(tp_rank) + " of " +
                                std::to_string(tp_size) + " is out of range");
  }
  return OkStatus();
}

Status CheckEp(const std::string& key, const ExpertParallel& ep) {
  if (ep.ep_size <= 0 || ep.ep_rank < 0 || ep.ep_rank >= ep.ep_size || ep.num_experts < 0 ||
      ep.num_experts % ep.ep_size != 0) {
    return InvalidArgumentError("'" + key + "': " + std::to_string(ep.num_experts) +
                                " experts do not split over EP rank " + std::to_string(ep.ep_rank) +
                                " of " + std::to_string(ep.ep_size));
  }
  return OkStatus();
}

// The TP shard box of one expert's tensor (tp_dim < 0: whole).
Result<Box> ExpertBox(const std::string& key, const Shape& expert_shape, int tp_dim, int tp_rank,
                      int tp_size) {
  SP_RETURN_IF_ERROR(CheckTp(key, tp_rank, tp_size));
  Box b = Box::Whole(expert_shape);
  if (tp_dim < 0) return b;
  if (static_cast<size_t>(tp_dim) >= expert_shape.size()) {
    return InvalidArgumentError("'" + key + "': TP dim " + std::to_string(tp_dim) +
                                " is outside expert shape " + ShapeToString(expert_shape));
  }
  const std::vector<int64_t> sizes = ChunkSizes(expert_shape[tp_dim], tp_size);
  for (int r = 0; r < tp_rank; ++r) b.offset[tp_dim] += sizes[r];
  b.shape[tp_dim] = sizes[tp_rank];
  return b;
}

Result<LocalTensor> Validated(LocalTensor t, const std::string& what) {
  SP_RETURN_IF_ERROR(ValidateLocalTensor(t).WithContext(what));
  return t;
}

}  // namespace

Result<LocalTensor> ColumnParallel(std::string key, DType dtype, void* data, Shape global_shape,
                                   int tp_rank, int tp_size) {
  return SplitTensor(std::move(key), dtype, data, std::move(global_shape), 0, tp_rank, tp_size);
}

Result<LocalTensor> RowParallel(std::string key, DType dtype, void* data, Shape global_shape,
                                int tp_rank, int tp_size) {
  return SplitTensor(std::move(key), dtype, data, std::move(global_shape), 1, tp_rank, tp_size);
}

int64_t PaddedVocabSize(int64_t vocab, int64_t divisible_by, int tp_size) {
  const int64_t m = divisible_by * tp_size;
  return (vocab + m - 1) / m * m;
}

Result<LocalTensor> VocabParallel(std::string key, DType dtype, void* data, int64_t padded_vocab,
                                  int64_t hidden, int tp_rank, int tp_size) {
  SP_RETURN_IF_ERROR(CheckTp(key, tp_rank, tp_size));
  if (padded_vocab % tp_size != 0) {
    return InvalidArgumentError("'" + key + "': padded vocabulary " + std::to_string(padded_vocab) +
                                " is not divisible by TP size " + std::to_string(tp_size));
  }
  return SplitTensor(std::move(key), dtype, data, {padded_vocab, hidden}, 0, tp_rank, tp_size);
}

Result<std::vector<int>> StageLayers(const PipelineLayout& p, int pp_rank, int vp_stage) {
  const int chunks = p.pp_size * p.vp_size;
  if (p.pp_size <= 0 || p.vp_size <= 0 || pp_rank < 0 || pp_rank >= p.pp_size || vp_stage < 0 ||
      vp_stage >= p.vp_size) {
    return InvalidArgumentError("pipeline rank " + std::to_string(pp_rank) + " of " +
                                std::to_string(p.pp_size) + ", virtual stage " +
                                std::to_string(vp_stage) + " of " + std::to_string(p.vp_size) +
                                " is out of range");
  }
  std::vector<int> per_chunk = p.chunk_layers;
  if (per_chunk.empty()) {
    if (p.num_layers % chunks != 0) {
      return InvalidArgumentError(std::to_string(p.num_layers) +
                                  " layers do not split evenly into " + std::to_string(chunks) +
                                  " pipeline chunks");
    }
    per_chunk.assign(chunks, p.num_layers / chunks);
  }
  if (static_cast<int>(per_chunk.size()) != chunks ||
      std::any_of(per_chunk.begin(), per_chunk.end(), [](int n) { return n < 0; }) ||
      std::accumulate(per_chunk.begin(), per_chunk.end(), 0) != p.num_layers) {
    return InvalidArgumentError("pipeline chunk sizes do not give " + std::to_string(chunks) +
                                " chunks of " + std::to_string(p.num_layers) + " layers in all");
  }
  const int chunk = vp_stage * p.pp_size + pp_rank;
  const int first = std::accumulate(per_chunk.begin(), per_chunk.begin() + chunk, 0);
  std::vector<int> layers(per_chunk[chunk]);
  std::iota(layers.begin(), layers.end(), first);
  return layers;
}

Result<int> GlobalLayer(const PipelineLayout& p, int pp_rank, int vp_stage, int local_index) {
  SP_ASSIGN_OR_RETURN(std::vector<int> layers, StageLayers(p, pp_rank, vp_stage));
  if (local_index < 0 || local_index >= static_cast<int>(layers.size())) {
    return InvalidArgumentError("local layer " + std::to_string(local_index) +
                                " of pipeline rank " + std::to_string(pp_rank) +
                                ", virtual stage " + std::to_string(vp_stage) + " which holds " +
                                std::to_string(layers.size()) + " layers");
  }
  return layers[local_index];
}

std::string LayerKey(std::string_view prefix, int layer, std::string_view name) {
  return std::string(prefix) + "." + std::to_string(layer) + "." + std::string(name);
}

Result<LocalTensor> PerExpertWeights(const std::function<std::string(int)>& key_of, DType dtype,
                                     void* data, Shape expert_shape, int tp_dim,
                                     const ExpertParallel& ep, int tp_rank, int tp_size) {
  const std::string name = key_of(ep.first_expert());
  SP_RETURN_IF_ERROR(CheckEp(name, ep));
  SP_ASSIGN_OR_RETURN(Box box, ExpertBox(name, expert_shape, tp_dim, tp_rank, tp_size));
  LocalTensor t;
  t.dtype = dtype;
  t.data = data;
  t.shape = {ep.local_experts()};
  t.shape.insert(t.shape.end(), box.shape.begin(), box.shape.end());
  for (int le = 0; le < ep.local_experts(); ++le) {
    Shape local_offset(t.shape.size(), 0);
    local_offset[0] = le;
    t.segments.push_back(Segment{key_of(ep.first_expert() + le), expert_shape, box, local_offset});
  }
  return Validated(std::move(t), "PerExpertWeights '" + name + "'");
}

Result<LocalTensor> StackedExperts(std::string key, DType dtype, void* data, Shape expert_shape,
                                   int tp_dim, const ExpertParallel& ep, int tp_rank, int tp_size) {
  SP_RETURN_IF_ERROR(CheckEp(key, ep));
  SP_ASSIGN_OR_RETURN(Box box, ExpertBox(key, expert_shape, tp_dim, tp_rank, tp_size));
  Shape global{ep.num_experts};
  global.insert(global.end(), expert_shape.begin(), expert_shape.end());
  box.offset.insert(box.offset.begin(), ep.first_expert());
  box.shape.insert(box.shape.begin(), ep.local_experts());
  LocalTensor t;
  t.dtype = dtype;
  t.data = data;
  t.shape = box.shape;
  t.segments.push_back(Segment{key, global, box, Shape(global.size(), 0)});
  return Validated(std::move(t), "StackedExperts '" + key + "'");
}

Result<LocalTensor> FusedGateUpExperts(std::string key, DType dtype, void* data, int64_t inter,
                                       int64_t hidden, const ExpertParallel& ep, int tp_rank,
                                       int tp_size) {
  SP_RETURN_IF_ERROR(CheckEp(key, ep));
  SP_ASSIGN_OR_RETURN(Box part, ExpertBox(key, {inter, hidden}, 0, tp_rank, tp_size));
  const Shape global{ep.num_experts, 2 * inter, hidden};
  LocalTensor t;
  t.dtype = dtype;
  t.data = data;
  t.shape = {ep.local_experts(), 2 * part.shape[0], hidden};
  for (int le = 0; le < ep.local_experts(); ++le) {
    for (int64_t gate_up = 0; gate_up < 2; ++gate_up) {  // gate rows, then up rows
      Box b({ep.first_expert() + le, gate_up * inter + part.offset[0], 0},
            {1, part.shape[0], hidden});
      t.segments.push_back(Segment{key, global, b, {le, gate_up * part.shape[0], 0}});
    }
  }
  return Validated(std::move(t), "FusedGateUpExperts '" + key + "'");
}

}  // namespace shardpoint
