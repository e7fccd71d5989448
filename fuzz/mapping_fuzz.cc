// libFuzzer target for HF mapping rules: ParseHfMapping on the input (a
// mapping file is user-written JSON), then, for whatever parses, the rule
// compiler and both mapping directions over a small Llama-like tensor list.
// Any outcome but a crash, a hang or an untyped exception is fine.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "shardpoint/hf.h"
#include "src/hf/mapping.h"

using shardpoint::internal_hf::CompileMapping;
using shardpoint::internal_hf::HfMeta;
using shardpoint::internal_hf::MapHfToKeys;
using shardpoint::internal_hf::MapKeysToHf;
using shardpoint::internal_hf::MappedKey;
using shardpoint::internal_hf::ResolveVars;
using shardpoint::internal_hf::Vars;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  shardpoint::Result<shardpoint::HfMapping> m = shardpoint::ParseHfMapping(text, "fuzz");
  if (!m.ok()) return 0;
  if (!CompileMapping(*m).ok()) return 0;
  shardpoint::Result<Vars> vars = ResolveVars(
      *m, R"({"vocab_size": 8, "num_attention_heads": 4, "num_key_value_heads": 2})", {});
  if (!vars.ok()) return 0;
  using shardpoint::DType;
  const std::vector<HfMeta> hf = {
      {"model.embed_tokens.weight", DType::kF32, {8, 4}},
      {"model.layers.0.self_attn.q_proj.weight", DType::kF32, {4, 4}},
      {"model.layers.0.self_attn.k_proj.weight", DType::kF32, {2, 4}},
      {"model.layers.0.self_attn.v_proj.weight", DType::kF32, {2, 4}},
      {"model.layers.0.mlp.gate_proj.weight", DType::kBF16, {6, 4}},
      {"model.layers.0.mlp.up_proj.weight", DType::kBF16, {6, 4}},
      {"model.layers.1.input_layernorm.weight", DType::kF32, {4}},
      {"lm_head.weight", DType::kF32, {8, 4}},
  };
  shardpoint::Result<std::vector<MappedKey>> keys = MapHfToKeys(*m, hf, *vars);
  if (!keys.ok()) return 0;
  std::vector<HfMeta> back;
  for (const MappedKey& k : *keys) back.push_back({k.info.key, k.info.dtype, k.info.shape});
  (void)MapKeysToHf(*m, back, *vars);
  return 0;
}
