#include "tests/testing/transformer.h"

#include <functional>

#include "shardpoint/layout.h"

namespace shardpoint::testing {

std::string ParallelConfig::ToString() const {
  return "TP=" + std::to_string(tp) + " x PP=" + std::to_string(pp) +
         " x DP=" + std::to_string(dp) + (distributed_optimizer ? " (distributed optimizer)" : "");
}

std::vector<TensorSpec> ModelTensors(const ModelConfig& m) {
  std::vector<TensorSpec> params;
  const int64_t h = m.hidden, f = m.ffn, v = m.vocab;
  params.push_back({"embedding.word_embeddings.weight", DType::kBF16, {v, h}, 0, -1, 0, false});
  for (int l = 0; l < m.layers; ++l) {
    const std::string p = "decoder.layers." + std::to_string(l) + ".";
    params.push_back({p + "input_layernorm.weight", DType::kBF16, {h}, -1, l, -1, false});
    params.push_back(
        {p + "self_attention.linear_qkv.weight", DType::kBF16, {3 * h, h}, 0, l, -1, false});
    params.push_back(
        {p + "self_attention.linear_proj.weight", DType::kBF16, {h, h}, 1, l, -1, false});
    params.push_back({p + "pre_mlp_layernorm.weight", DType::kBF16, {h}, -1, l, -1, false});
    params.push_back({p + "mlp.linear_fc1.weight", DType::kBF16, {f, h}, 0, l, -1, false});
    params.push_back({p + "mlp.linear_fc1.bias", DType::kBF16, {f}, 0, l, -1, false});
    params.push_back({p + "mlp.linear_fc2.weight", DType::kBF16, {h, f}, 1, l, -1, false});
  }
  params.push_back({"decoder.final_layernorm.weight", DType::kBF16, {h}, -1, -1, 1, false});
  params.push_back({"output_layer.weight", DType::kBF16, {v, h}, 0, -1, 1, false});
  std::vector<TensorSpec> all = params;
  for (const char* state : {"fp32_param", "exp_avg", "exp_avg_sq"}) {
    for (TensorSpec s : params) {
      s.key = std::string("optimizer.state.") + state + "." + s.key;
      s.dtype = DType::kF32;
      s.optimizer = true;
      all.push_back(s);
    }
  }
  return all;
}

RefModel MakeReference(const ModelConfig& m, uint64_t seed) {
  RefModel ref;
  for (const TensorSpec& s : ModelTensors(m)) {
    ref[s.key] = RandomRefTensor(s.dtype, s.shape, seed ^ std::hash<std::string>{}(s.key));
  }
  return ref;
}

Result<RankState> BuildRankState(const ModelConfig& m, const ParallelConfig& p, int rank) {
  if (rank < 0 || rank >= p.world() || m.layers % p.pp != 0) {
    return InvalidArgumentError("bad rank or layers not divisible by PP");
  }
  const int tp = rank % p.tp, dp = (rank / p.tp) % p.dp, pp = rank / (p.tp * p.dp);
  const int per_stage = m.layers / p.pp;
  RankState rs;
  auto alloc = [&](int64_t n, DType dtype) {
    size_t bytes = static_cast<size_t>(n) * DTypeSize(dtype);
    rs.buffers.emplace_back(new char[std::max<size_t>(bytes, 1)]());
    rs.bytes += bytes;
    return rs.buffers.back().get();
  };
  for (const TensorSpec& s : ModelTensors(m)) {
    if (s.layer >= 0 && s.layer / per_stage != pp) continue;
    if (s.stage_hint == 0 && pp != 0) continue;
    if (s.stage_hint == 1 && pp != p.pp - 1) continue;
    // The TP shard (or a TP replica).
    LocalTensor lt;
    if (s.split_dim < 0) {
      lt = WholeTensor(s.key, s.dtype, nullptr, s.shape);
    } else {
      SP_ASSIGN_OR_RETURN(lt, SplitTensor(s.key, s.dtype, nullptr, s.shape, s.split_dim, tp, p.tp));
    }
    const int64_t n = Box::Whole(lt.shape).num_elements();
    if (s.optimizer && p.distributed_optimizer) {
      // Flat-sharded over DP, torch.chunk sizes.
      std::vector<int64_t> sizes = ChunkSizes(n, p.dp);
      int64_t begin = 0;
      for (int i = 0; i < dp; ++i) begin += sizes[i];
      SP_ASSIGN_OR_RETURN(
          lt, FlatShard(lt, FlatRange{begin, begin + sizes[dp]}, alloc(sizes[dp], s.dtype)));
    } else {
      lt.data = alloc(n, s.dtype);
    }
    rs.state.tensors.push_back(std::move(lt));
  }
  rs.state.objects.push_back(
      Object{"rng_state", "rng-of-rank-" + std::to_string(rank), {rank}, {p.world()}});
  rs.state.common = std::string("{\"iteration\": 1000}");
  rs.state.metadata_json =
      "{\"model\": \"demo-transformer\", \"layout\": \"" + p.ToString() + "\"}";
  return rs;
}

}  // namespace shardpoint::testing
