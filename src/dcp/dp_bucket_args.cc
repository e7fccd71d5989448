// common.pt's args for the dp_reshardable rebuild (dp_buckets.h): the
// parallel sizes and the pipeline split, as Megatron-Core's
// get_num_layers_to_build (transformer_block.py) computes it, and model chunks'
// layers as get_transformer_layer_offset (transformer_layer.py) does.
#include <algorithm>
#include <nlohmann/json.hpp>

#include "src/dcp/dp_buckets.h"

namespace shardpoint::internal_dcp {

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
  auto set = [&](const char* k) {  // present, and neither null, false, 0 nor 1
    auto it = st.find(k);
    if (it == st.end() || it->is_null() || (it->is_boolean() && !it->get<bool>())) return false;
    return !(it->is_number_integer() && it->get<int64_t>() <= 1);
  };
  a.tp_size = get("tensor_model_parallel_size", 0);
  a.pp_size = get("pipeline_model_parallel_size", 1);
  a.num_layers = get("num_layers", -1);
  a.first_stage_layers = get("decoder_first_pipeline_num_layers", -1);
  a.last_stage_layers = get("decoder_last_pipeline_num_layers", -1);
  a.vpp_size = std::max(get("virtual_pipeline_model_parallel_size", 1), 1);
  const int per_virtual = get("num_layers_per_virtual_pipeline_stage", 0);
  if (a.vpp_size == 1 && per_virtual > 0 && a.num_layers > 0 && a.pp_size > 0) {
    // arguments.py: V = (num_layers / PP) / num_layers_per_virtual_pipeline_stage
    a.vpp_size = std::max(a.num_layers / a.pp_size / per_virtual, 1);
  }
  a.ep_size = get("expert_model_parallel_size", 1);
  a.etp_size = get("expert_tensor_parallel_size", -1);
  auto gemm = st.find("moe_grouped_gemm");
  a.grouped_gemm = gemm != st.end() && gemm->is_boolean() && gemm->get<bool>();
  auto untie = st.find("untie_embeddings_and_output_weights");
  a.tied = untie != st.end() && untie->is_boolean() && !untie->get<bool>();
  for (const char* k : {"pipeline_model_parallel_layout", "account_for_embedding_in_pipeline_split",
                        "account_for_loss_in_pipeline_split"}) {
    if (a.pp_size > 1 && a.not_derived.empty() && set(k)) {
      a.not_derived = std::string("args.") + k + " is set (its stages' layers are not derived)";
    }
  }
  return a;
}

std::vector<int64_t> StageBounds(const DpBucketArgs& args, int64_t layers, std::string* why) {
  if (args.pp_size == 1) return {0, layers};
  const int64_t pp = args.pp_size, f = args.first_stage_layers, l = args.last_stage_layers;
  int64_t rest = layers, stages = pp;
  if (f >= 0) rest -= f, --stages;
  if (l >= 0) rest -= l, --stages;
  if (pp < 1 || rest < 0 || (stages > 0 && rest % stages != 0) || (stages == 0 && rest != 0)) {
    *why = std::to_string(layers) + " layers do not split over pipeline_model_parallel_size " +
           std::to_string(pp) + (f >= 0 ? " with " + std::to_string(f) + " on the first" : "") +
           (l >= 0 ? " with " + std::to_string(l) + " on the last" : "");
    return {};
  }
  std::vector<int64_t> bounds{0};
  for (int64_t s = 0; s < pp; ++s) {
    int64_t n = stages > 0 ? rest / stages : 0;
    if (s == 0 && f >= 0) n = f;
    if (s == pp - 1 && l >= 0) n = l;
    bounds.push_back(bounds.back() + n);
  }
  return bounds;
}

std::vector<LayerRange> ChunkLayers(const DpBucketArgs& args, int64_t layers, std::string* why) {
  const std::vector<int64_t> bounds = StageBounds(args, layers, why);
  if (bounds.empty()) return {};
  const int64_t v = args.vpp_size;
  std::vector<int64_t> per_chunk;  // each stage's layers in one of its chunks
  for (size_t s = 0; s + 1 < bounds.size(); ++s) {
    const int64_t n = bounds[s + 1] - bounds[s];
    if (v < 1 || n % v != 0) {
      *why = "pipeline stage " + std::to_string(s) + "'s " + std::to_string(n) +
             " layers do not split into virtual_pipeline_model_parallel_size " + std::to_string(v) +
             " model chunks";
      return {};
    }
    per_chunk.push_back(n / v);
  }
  std::vector<LayerRange> out;
  for (size_t s = 0; s < per_chunk.size(); ++s) {
    int64_t before = 0;  // the earlier stages' layers in each chunk
    for (size_t q = 0; q < s; ++q) before += per_chunk[q];
    for (int64_t c = 0; c < v; ++c) {
      const int64_t begin = c * (layers / v) + before;
      out.push_back({begin, begin + per_chunk[s]});
    }
  }
  return out;
}

}  // namespace shardpoint::internal_dcp
