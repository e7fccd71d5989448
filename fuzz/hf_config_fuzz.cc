// libFuzzer target for an HF config.json: ResolveVars reads integer fields
// of it for the rules' variables (vocab_size, heads, groups), then the rules
// map a small model with those variables. The input is the config text.
#include <cstdint>
#include <string>
#include <vector>

#include "shardpoint/hf.h"
#include "src/hf/mapping.h"

using shardpoint::internal_hf::HfMeta;
using shardpoint::internal_hf::MapHfToKeys;
using shardpoint::internal_hf::MapKeysToHf;
using shardpoint::internal_hf::MappedKey;
using shardpoint::internal_hf::ResolveVars;
using shardpoint::internal_hf::Vars;

namespace {

const shardpoint::HfMapping& Mapping() {
  static const shardpoint::HfMapping m = [] {
    shardpoint::Result<shardpoint::HfMapping> r = shardpoint::ParseHfMapping(R"({
      "name": "fuzz", "keep_unmatched": true,
      "rules": [
        {"sp": "embedding.weight", "hf": "model.embed_tokens.weight", "split": "vocab",
         "rows": "vocab_size"},
        {"sp": "layers.{layer}.qkv.weight",
         "hf": ["model.layers.{layer}.q.weight", "model.layers.{layer}.k.weight",
                "model.layers.{layer}.v.weight"],
         "fuse": "gqa", "heads": "num_attention_heads", "groups": "num_key_value_heads",
         "split": "gqa"}
      ]})",
                                                                             "fuzz");
    if (!r.ok()) __builtin_trap();
    return *r;
  }();
  return m;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string config(reinterpret_cast<const char*>(data), size);
  shardpoint::Result<Vars> vars = ResolveVars(Mapping(), config, {});
  if (!vars.ok()) return 0;
  using shardpoint::DType;
  const std::vector<HfMeta> hf = {
      {"model.embed_tokens.weight", DType::kF32, {10, 4}},
      {"model.layers.0.q.weight", DType::kF32, {4, 4}},
      {"model.layers.0.k.weight", DType::kF32, {2, 4}},
      {"model.layers.0.v.weight", DType::kF32, {2, 4}},
  };
  shardpoint::Result<std::vector<MappedKey>> keys = MapHfToKeys(Mapping(), hf, *vars);
  if (!keys.ok()) return 0;
  std::vector<HfMeta> back;
  for (const MappedKey& k : *keys) back.push_back({k.info.key, k.info.dtype, k.info.shape});
  (void)MapKeysToHf(Mapping(), back, *vars);
  return 0;
}
