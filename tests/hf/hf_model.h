// Small HF-style models built in code for the HF tests (no downloads).
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "shardpoint/hf.h"

namespace shardpoint::hftest {

#ifdef SP_SOURCE_DIR
// <repo>/<rel>, from any working directory: the build defines SP_SOURCE_DIR
// for the files that use this (CMakeLists.txt), not for every test object.
inline std::string RepoPath(const std::string& rel) {
  return std::string(SP_SOURCE_DIR) + "/" + rel;
}
#endif

inline std::string TempDir(const std::string& name) {
  std::string d = ::testing::TempDir() + "sp_hf_" + name + "_" +
                  std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "_" +
                  std::to_string(reinterpret_cast<uintptr_t>(&name) & 0xffff);
  DefaultStorage()->RemoveAll(d).IgnoreError();
  return d;
}

// Distinct float values (their bits identify the tensor and element).
inline HfTensor RandomTensor(const std::string& name, Shape shape, DType dtype = DType::kF32,
                             uint32_t seed = 0) {
  HfTensor t{name, dtype, shape, {}};
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  t.bytes.resize(n * DTypeSize(dtype));
  std::mt19937 rng(seed + static_cast<uint32_t>(std::hash<std::string>()(name)));
  for (char& c : t.bytes) c = static_cast<char>(rng() & 0x3f);  // small, finite, no NaN
  return t;
}

struct LlamaDims {
  int layers = 4;
  int64_t hidden = 32, heads = 4, groups = 2, head_dim = 8, ffn = 48, vocab = 64;
  bool qkv_bias = false;
  int experts = 0;  // > 0: a Qwen-MoE model
  int64_t moe_ffn = 16;
};

inline std::string LlamaConfig(const LlamaDims& d) {
  return "{\"hidden_size\": " + std::to_string(d.hidden) +
         ", \"num_attention_heads\": " + std::to_string(d.heads) +
         ", \"num_key_value_heads\": " + std::to_string(d.groups) +
         ", \"num_hidden_layers\": " + std::to_string(d.layers) +
         ", \"vocab_size\": " + std::to_string(d.vocab) + "}";
}

inline std::vector<HfTensor> LlamaTensors(const LlamaDims& d, DType dt = DType::kF32) {
  std::vector<HfTensor> t;
  const int64_t H = d.hidden, q = d.heads * d.head_dim, kv = d.groups * d.head_dim;
  t.push_back(RandomTensor("model.embed_tokens.weight", {d.vocab, H}, dt));
  t.push_back(RandomTensor("model.norm.weight", {H}, dt));
  t.push_back(RandomTensor("lm_head.weight", {d.vocab, H}, dt));
  for (int l = 0; l < d.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    t.push_back(RandomTensor(p + "input_layernorm.weight", {H}, dt));
    t.push_back(RandomTensor(p + "post_attention_layernorm.weight", {H}, dt));
    t.push_back(RandomTensor(p + "self_attn.q_proj.weight", {q, H}, dt));
    t.push_back(RandomTensor(p + "self_attn.k_proj.weight", {kv, H}, dt));
    t.push_back(RandomTensor(p + "self_attn.v_proj.weight", {kv, H}, dt));
    t.push_back(RandomTensor(p + "self_attn.o_proj.weight", {H, q}, dt));
    if (d.qkv_bias) {
      t.push_back(RandomTensor(p + "self_attn.q_proj.bias", {q}, dt));
      t.push_back(RandomTensor(p + "self_attn.k_proj.bias", {kv}, dt));
      t.push_back(RandomTensor(p + "self_attn.v_proj.bias", {kv}, dt));
    }
    if (d.experts == 0) {
      t.push_back(RandomTensor(p + "mlp.gate_proj.weight", {d.ffn, H}, dt));
      t.push_back(RandomTensor(p + "mlp.up_proj.weight", {d.ffn, H}, dt));
      t.push_back(RandomTensor(p + "mlp.down_proj.weight", {H, d.ffn}, dt));
      continue;
    }
    t.push_back(RandomTensor(p + "mlp.gate.weight", {d.experts, H}, dt));
    for (int e = 0; e < d.experts; ++e) {
      const std::string x = p + "mlp.experts." + std::to_string(e) + ".";
      t.push_back(RandomTensor(x + "gate_proj.weight", {d.moe_ffn, H}, dt));
      t.push_back(RandomTensor(x + "up_proj.weight", {d.moe_ffn, H}, dt));
      t.push_back(RandomTensor(x + "down_proj.weight", {H, d.moe_ffn}, dt));
    }
  }
  return t;
}

inline const HfTensor& Find(const std::vector<HfTensor>& ts, const std::string& name) {
  for (const HfTensor& t : ts) {
    if (t.name == name) return t;
  }
  static HfTensor none;
  ADD_FAILURE() << "no HF tensor " << name;
  return none;
}

// Rows [begin, begin + n) of a row-major tensor whose rows have `row_bytes`.
inline std::string Rows(const HfTensor& t, int64_t begin, int64_t n) {
  int64_t row = static_cast<int64_t>(DTypeSize(t.dtype));
  for (size_t i = 1; i < t.shape.size(); ++i) row *= t.shape[i];
  return t.bytes.substr(begin * row, n * row);
}

}  // namespace shardpoint::hftest
