// Mapping rules: parsing, patterns, both directions, errors.
#include "src/hf/mapping.h"

#include <gtest/gtest.h>

#include <map>

#include "shardpoint/hf_rules.h"
#include "src/hf/megatron_vars.h"
#include "tests/hf/hf_model.h"

using shardpoint::internal_hf::HfMeta;
using shardpoint::internal_hf::MapHfToKeys;
using shardpoint::internal_hf::MapKeysToHf;
using shardpoint::internal_hf::MappedKey;
using shardpoint::internal_hf::MegatronArgsVars;
using shardpoint::internal_hf::NamePattern;
using shardpoint::internal_hf::NaturalLess;
using shardpoint::internal_hf::ResolveVars;
using shardpoint::internal_hf::Vars;

namespace shardpoint {
namespace {

using namespace hftest;

TEST(HfPattern, MatchAndFormat) {
  Result<NamePattern> p = NamePattern::Parse("a.{layer}.e.{expert}.w");
  ASSERT_TRUE(p.ok());
  auto b = p->Match("a.12.e.0.w");
  ASSERT_TRUE(b);
  EXPECT_EQ((*b)["layer"], 12);
  EXPECT_EQ((*b)["expert"], 0);
  EXPECT_FALSE(p->Match("a.01.e.0.w"));
  EXPECT_FALSE(p->Match("a.x.e.0.w"));
  EXPECT_FALSE(p->Match("a.1.e.0.wx"));
  EXPECT_EQ(*p->Format({{"layer", 3}, {"expert", 5}}), "a.3.e.5.w");
  EXPECT_FALSE(p->Format({{"layer", 3}}).ok());
  EXPECT_FALSE(NamePattern::Parse("a.{x}{y}").ok());
  EXPECT_FALSE(NamePattern::Parse("a.{x").ok());
  EXPECT_FALSE(NamePattern::Parse("a.{}").ok());
  EXPECT_FALSE(NamePattern::Parse("a.{x}1").ok());
  EXPECT_TRUE(NaturalLess("l.2.w", "l.10.w"));
  EXPECT_FALSE(NaturalLess("l.10.w", "l.2.w"));
}

TEST(HfMappingParse, Errors) {
  auto err = [](const std::string& json, const std::string& substr) {
    Result<HfMapping> m = ParseHfMapping(json, "test.json");
    ASSERT_FALSE(m.ok()) << json;
    EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(m.status().message().find(substr), std::string::npos) << m.status().ToString();
    EXPECT_NE(m.status().message().find("test.json"), std::string::npos);
  };
  err("[1]", "not a JSON object");
  err("[", "JSON syntax error at line 1, column 2");
  err(R"({"rulez": []})", "unknown field");
  err(R"({"rules": [{"sp": "a"}]})", "required");
  err(R"({"rules": [{"sp": "a", "hf": "b", "splitt": "row"}]})", "unknown field");
  err(R"({"rules": [{"sp": "a", "hf": "b", "split": "diagonal"}]})", "split hint");
  err(R"({"rules": [{"sp": "a", "hf": ["q", "k"], "fuse": "gqa"}]})", "gqa needs");
  err(R"({"rules": [{"sp": "a.{layer}", "hf": "b"}]})", "placeholders");
  err(R"({"rules": [{"sp": "a.{layer}", "hf": "b.{layer}.{expert}"}]})", "placeholders");
  err(R"({"rules": [{"sp": "a", "hf": ["b", "c"], "sizes": [1]}]})", "sizes");
  err(R"({"variables": {"x": "y"}})", "not an integer");
  err(R"({"rules": [{"sp": "a", "hf": ["b", "c"], "rows": "vocab_size"}]})", "rename rule");
  err(R"({"rules": [{"sp": "a", "hf": "b", "rows": []}]})", "rows");
  err(R"({"skip": ["optimizer.", 3]})", "\"skip\" must hold non-empty strings");
  err(R"({"skip": [""]})", "\"skip\" must hold non-empty strings");
  EXPECT_TRUE(ParseHfMapping(R"({"name": "x", // comments are allowed
      "rules": []})")
                  .ok());
}

// A syntax error names its line and column, and what the parser expected.
TEST(HfMappingParse, SyntaxErrorNamesLineAndColumn) {
  Result<HfMapping> m = ParseHfMapping(
      "{\"name\": \"x\",\n \"rules\": [\n  {\"sp\": \"a\", \"hf\": \"b\",}\n ]}", "my.json");
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(m.status().message(),
            "mapping 'my.json': JSON syntax error at line 3, column 25: syntax error while "
            "parsing object key - unexpected '}'; expected string literal");
  m = ParseHfMapping("{\"rules\": [\n", "cut.json");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("line 2, column 1"), std::string::npos)
      << m.status().ToString();
}

TEST(HfMapping, ShippedRulesParse) {
  for (const char* f : {"rules/llama.json", "rules/megatron_llama.json", "rules/megatron_moe.json",
                        "rules/qwen_moe.json"}) {
    Result<HfMapping> m = ReadHfMapping(RepoPath(f));
    ASSERT_TRUE(m.ok()) << f << ": " << m.status().ToString();
    EXPECT_FALSE(m->rules.empty());
  }
}

// The shipped rules are built into the library: the same rules as the files,
// without reading rules/ (a moved or installed binary has them).
TEST(HfMapping, ShippedRulesAreBuiltIn) {
  EXPECT_EQ(ShippedHfMappingNames(),
            (std::vector<std::string>{"llama", "megatron_llama", "megatron_moe", "qwen_moe"}));
  for (const std::string& name : ShippedHfMappingNames()) {
    Result<HfMapping> built_in = ShippedHfMapping(name);
    ASSERT_TRUE(built_in.ok()) << name << ": " << built_in.status().ToString();
    Result<HfMapping> file = ReadHfMapping(RepoPath("rules/" + name + ".json"));
    ASSERT_TRUE(file.ok()) << file.status().ToString();
    EXPECT_EQ(built_in->name, file->name);
    ASSERT_EQ(built_in->rules.size(), file->rules.size());
    for (size_t i = 0; i < file->rules.size(); ++i) {
      EXPECT_EQ(built_in->rules[i].sp, file->rules[i].sp);
      EXPECT_EQ(built_in->rules[i].hf, file->rules[i].hf);
    }
  }
  Result<HfMapping> none = ShippedHfMapping("gpt9");
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(
      none.status().message(),
      "no shipped mapping named 'gpt9' (shipped: llama, megatron_llama, megatron_moe, qwen_moe)");
}

std::vector<HfMeta> Metas(const std::vector<HfTensor>& ts) {
  std::vector<HfMeta> out;
  for (const HfTensor& t : ts) out.push_back({t.name, t.dtype, t.shape});
  return out;
}

TEST(HfMapping, BothDirectionsAreInverse) {
  LlamaDims d;
  d.experts = 3;
  d.qkv_bias = true;
  Result<HfMapping> m = ReadHfMapping(RepoPath("rules/qwen_moe.json"));
  ASSERT_TRUE(m.ok());
  Vars vars = {
      {"num_attention_heads", d.heads}, {"num_key_value_heads", d.groups}, {"vocab_size", d.vocab}};
  std::vector<HfMeta> hf = Metas(LlamaTensors(d));
  Result<std::vector<MappedKey>> keys = MapHfToKeys(*m, hf, vars);
  ASSERT_TRUE(keys.ok()) << keys.status().ToString();
  std::vector<HfMeta> metas;
  for (const MappedKey& k : *keys) {
    metas.push_back({k.info.key, k.info.dtype, k.info.shape});
    if (k.info.key == "decoder.layers.1.mlp.experts.linear_fc1.weight") {
      EXPECT_EQ(k.info.shape, (Shape{3, 2 * d.moe_ffn, d.hidden}));
      EXPECT_EQ(k.info.split, "experts_swiglu");
    }
    if (k.info.key == "decoder.layers.0.self_attention.linear_qkv.weight") {
      EXPECT_EQ(k.info.shape, (Shape{(d.heads + 2 * d.groups) * d.head_dim, d.hidden}));
      EXPECT_EQ(k.pieces.size(), 3u * d.groups);
    }
  }
  Result<std::vector<MappedKey>> back = MapKeysToHf(*m, metas, vars);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  std::vector<HfMeta> hf2;
  for (const MappedKey& k : *back) {
    for (const HfMeta& t : k.hf_tensors) hf2.push_back(t);
  }
  auto by_name = [](const HfMeta& a, const HfMeta& b) { return a.name < b.name; };
  std::sort(hf.begin(), hf.end(), by_name);
  std::sort(hf2.begin(), hf2.end(), by_name);
  ASSERT_EQ(hf.size(), hf2.size());
  for (size_t i = 0; i < hf.size(); ++i) {
    EXPECT_EQ(hf[i].name, hf2[i].name);
    EXPECT_EQ(hf[i].shape, hf2[i].shape) << hf[i].name;
  }
  for (size_t i = 0; i < keys->size(); ++i) {
    ASSERT_EQ((*keys)[i].pieces.size(), (*back)[i].pieces.size());
    for (size_t p = 0; p < (*keys)[i].pieces.size(); ++p) {
      EXPECT_EQ((*keys)[i].pieces[p].box, (*back)[i].pieces[p].box);
      EXPECT_EQ((*keys)[i].pieces[p].hf_offset, (*back)[i].pieces[p].hf_offset);
    }
  }
}

// megatron_moe: experts stacked under the layer dim, two stacked
// placeholders ("stack": ["layer", "expert"]). HF -> keys -> HF is the
// identity on names, shapes and pieces; expert e of layer l is the box
// [l, e, ...] of the key; a missing (layer, expert) pair, even the last, is
// an error naming both indices.
TEST(HfMapping, TwoStackedPlaceholdersBothDirections) {
  LlamaDims d;
  d.experts = 3;
  d.layers = 2;
  Result<HfMapping> m = ReadHfMapping(RepoPath("rules/megatron_moe.json"));
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  Vars vars = {
      {"num_attention_heads", d.heads}, {"num_key_value_heads", d.groups}, {"vocab_size", d.vocab}};
  std::vector<HfMeta> hf = Metas(LlamaTensors(d));
  Result<std::vector<MappedKey>> keys = MapHfToKeys(*m, hf, vars);
  ASSERT_TRUE(keys.ok()) << keys.status().ToString();
  std::vector<HfMeta> metas;
  bool fc1 = false;
  for (const MappedKey& k : *keys) {
    metas.push_back({k.info.key, k.info.dtype, k.info.shape});
    if (k.info.key == "decoder.layers.mlp.experts.linear_fc1.weight") {
      fc1 = true;
      EXPECT_EQ(k.info.shape, (Shape{2, 3, 2 * d.moe_ffn, d.hidden}));
      ASSERT_EQ(k.pieces.size(), 2u * 3u * 2u);
      // Layer 1, expert 2: gate rows then up rows.
      EXPECT_EQ(k.pieces[10].hf, "model.layers.1.mlp.experts.2.gate_proj.weight");
      EXPECT_EQ(k.pieces[10].box, (Box{{1, 2, 0, 0}, {1, 1, d.moe_ffn, d.hidden}}));
      EXPECT_EQ(k.pieces[11].hf, "model.layers.1.mlp.experts.2.up_proj.weight");
      EXPECT_EQ(k.pieces[11].box, (Box{{1, 2, d.moe_ffn, 0}, {1, 1, d.moe_ffn, d.hidden}}));
    }
  }
  EXPECT_TRUE(fc1);
  Result<std::vector<MappedKey>> back = MapKeysToHf(*m, metas, vars);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ASSERT_EQ(keys->size(), back->size());
  size_t hf_count = 0;
  for (size_t i = 0; i < keys->size(); ++i) {
    const MappedKey &a = (*keys)[i], &b = (*back)[i];
    ASSERT_EQ(a.pieces.size(), b.pieces.size()) << a.info.key;
    for (size_t p = 0; p < a.pieces.size(); ++p) {
      EXPECT_EQ(a.pieces[p].hf, b.pieces[p].hf);
      EXPECT_EQ(a.pieces[p].box, b.pieces[p].box);
      EXPECT_EQ(a.pieces[p].hf_offset, b.pieces[p].hf_offset);
    }
    hf_count += b.hf_tensors.size();
  }
  EXPECT_EQ(hf_count, hf.size());

  for (const char* gone : {"model.layers.1.mlp.experts.2.", "model.layers.0.mlp.experts.1."}) {
    std::vector<HfMeta> gap;
    for (const HfMeta& t : hf) {
      if (t.name.find(gone) == std::string::npos) gap.push_back(t);
    }
    Result<std::vector<MappedKey>> r = MapHfToKeys(*m, gap, vars);
    ASSERT_FALSE(r.ok()) << gone;
    const std::string want = gone[13] == '1' ? "{layer} = 1, {expert} = 2 are missing"
                                             : "{layer} = 0, {expert} = 1 are missing";
    EXPECT_NE(r.status().message().find(want), std::string::npos) << r.status().ToString();
  }
  // A key with fewer dims than stacked placeholders; a placeholder listed twice.
  Result<std::vector<MappedKey>> low =
      MapKeysToHf(*m, {{"decoder.layers.mlp.experts.linear_fc2.weight", DType::kF32, {2}}}, vars);
  ASSERT_FALSE(low.ok());
  EXPECT_NE(low.status().message().find("stacked over 2 dims has rank 1"), std::string::npos);
  Result<HfMapping> twice =
      ParseHfMapping(R"({"rules": [{"sp": "w", "hf": "a.{l}.b", "stack": ["l", "l"]}]})");
  ASSERT_FALSE(twice.ok());
  EXPECT_NE(twice.status().message().find("{l} is listed twice"), std::string::npos);
}

// megatron_moe on a non-homogeneous model (MoE in layer 1 only): Megatron
// then stores per-layer keys (decoder.layers.<l>.*, no layer dim) with the
// experts stacked [E, ...]; layer 0 keeps a dense SwiGLU MLP whose norm is
// fused into linear_fc1. Every key exports to its HF tensors.
TEST(HfMapping, MegatronMoePerLayerKeysOfMixedModels) {
  Result<HfMapping> m = ReadHfMapping(RepoPath("rules/megatron_moe.json"));
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const int64_t H = 8, heads = 4, groups = 2, hd = 2, ffn = 12, inter = 4, E = 3;
  const Vars vars = {
      {"num_attention_heads", heads}, {"num_key_value_heads", groups}, {"vocab_size", 10}};
  std::vector<HfMeta> keys = {
      {"embedding.word_embeddings.weight", DType::kF32, {12, H}},
      {"decoder.final_layernorm.weight", DType::kF32, {H}},
      {"output_layer.weight", DType::kF32, {12, H}},
      {"decoder.layers.0.mlp.linear_fc1.layer_norm_weight", DType::kF32, {H}},
      {"decoder.layers.0.mlp.linear_fc1.weight", DType::kF32, {2 * ffn, H}},
      {"decoder.layers.0.mlp.linear_fc2.weight", DType::kF32, {H, ffn}},
      {"decoder.layers.1.pre_mlp_layernorm.weight", DType::kF32, {H}},
      {"decoder.layers.1.mlp.router.weight", DType::kF32, {E, H}},
      {"decoder.layers.1.mlp.experts.linear_fc1.weight", DType::kF32, {E, 2 * inter, H}},
      {"decoder.layers.1.mlp.experts.linear_fc2.weight", DType::kF32, {E, H, inter}},
  };
  for (int l = 0; l < 2; ++l) {
    const std::string p = "decoder.layers." + std::to_string(l) + ".self_attention.";
    keys.push_back({p + "linear_qkv.layer_norm_weight", DType::kF32, {H}});
    keys.push_back({p + "linear_qkv.weight", DType::kF32, {(heads + 2 * groups) * hd, H}});
    keys.push_back({p + "linear_proj.weight", DType::kF32, {H, heads * hd}});
  }
  Result<std::vector<MappedKey>> hf = MapKeysToHf(*m, keys, vars);
  ASSERT_TRUE(hf.ok()) << hf.status().ToString();
  std::map<std::string, Shape> got;
  for (const MappedKey& k : *hf) {
    for (const HfMeta& t : k.hf_tensors) got[t.name] = t.shape;
  }
  std::map<std::string, Shape> want = {
      {"model.embed_tokens.weight", {10, H}},
      {"model.norm.weight", {H}},
      {"lm_head.weight", {10, H}},
      {"model.layers.0.post_attention_layernorm.weight", {H}},
      {"model.layers.0.mlp.gate_proj.weight", {ffn, H}},
      {"model.layers.0.mlp.up_proj.weight", {ffn, H}},
      {"model.layers.0.mlp.down_proj.weight", {H, ffn}},
      {"model.layers.1.post_attention_layernorm.weight", {H}},
      {"model.layers.1.mlp.gate.weight", {E, H}},
  };
  for (int e = 0; e < E; ++e) {
    const std::string x = "model.layers.1.mlp.experts." + std::to_string(e) + ".";
    want[x + "gate_proj.weight"] = {inter, H};
    want[x + "up_proj.weight"] = {inter, H};
    want[x + "down_proj.weight"] = {H, inter};
  }
  for (int l = 0; l < 2; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    want[p + "input_layernorm.weight"] = {H};
    want[p + "self_attn.q_proj.weight"] = {heads * hd, H};
    want[p + "self_attn.k_proj.weight"] = {groups * hd, H};
    want[p + "self_attn.v_proj.weight"] = {groups * hd, H};
    want[p + "self_attn.o_proj.weight"] = {H, heads * hd};
  }
  EXPECT_EQ(got, want);
  for (const MappedKey& k : *hf) {
    if (k.info.key != "decoder.layers.1.mlp.experts.linear_fc1.weight") continue;
    ASSERT_EQ(k.pieces.size(), 2u * E);
    EXPECT_EQ(k.pieces[5].hf, "model.layers.1.mlp.experts.2.up_proj.weight");
    EXPECT_EQ(k.pieces[5].box, (Box{{2, inter, 0}, {1, inter, H}}));
  }

  // singleton_local_shards: one key per expert, SwiGLU fc1 as _w (gate) and
  // _v (up) keys, for the dense layer's MLP too; the same HF model.
  std::vector<HfMeta> single;
  for (const HfMeta& k : keys) {
    if (k.name.find(".mlp.linear_fc1.weight") != std::string::npos) {
      single.push_back({k.name + "_w", k.dtype, {ffn, H}});
      single.push_back({k.name + "_v", k.dtype, {ffn, H}});
    } else if (k.name.find(".mlp.experts.") != std::string::npos) {
      const std::string fc = k.name.substr(k.name.find(".experts.") + 9);  // linear_fc1.weight
      for (int e = 0; e < E; ++e) {
        const std::string base = "decoder.layers.1.mlp.experts." + std::to_string(e) + "." + fc;
        if (fc == "linear_fc1.weight") {
          single.push_back({base + "_w", k.dtype, {inter, H}});
          single.push_back({base + "_v", k.dtype, {inter, H}});
        } else {
          single.push_back({base, k.dtype, {H, inter}});
        }
      }
    } else {
      single.push_back(k);
    }
  }
  hf = MapKeysToHf(*m, single, vars);
  ASSERT_TRUE(hf.ok()) << hf.status().ToString();
  got.clear();
  for (const MappedKey& k : *hf) {
    for (const HfMeta& t : k.hf_tensors) got[t.name] = t.shape;
  }
  EXPECT_EQ(got, want);
}

TEST(HfMapping, MissingPartsAndStrictness) {
  Result<HfMapping> m = ReadHfMapping(RepoPath("rules/qwen_moe.json"));
  ASSERT_TRUE(m.ok());
  LlamaDims d;
  d.experts = 3;
  d.layers = 1;
  Vars vars = {
      {"num_attention_heads", d.heads}, {"num_key_value_heads", d.groups}, {"vocab_size", d.vocab}};
  std::vector<HfMeta> hf = Metas(LlamaTensors(d));
  // Expert 1 missing its up_proj.
  std::vector<HfMeta> no_up;
  for (const HfMeta& t : hf) {
    if (t.name != "model.layers.0.mlp.experts.1.up_proj.weight") no_up.push_back(t);
  }
  Result<std::vector<MappedKey>> r = MapHfToKeys(*m, no_up, vars);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("experts.1.up_proj.weight' is missing"), std::string::npos)
      << r.status().ToString();
  // Expert 1 missing entirely: a gap in the stack.
  std::vector<HfMeta> gap;
  for (const HfMeta& t : hf) {
    if (t.name.find("experts.1.") == std::string::npos) gap.push_back(t);
  }
  r = MapHfToKeys(*m, gap, vars);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("{expert} = 1"), std::string::npos) << r.status().ToString();
  // An unmatched tensor with keep_unmatched false; a missing variable.
  hf.push_back({"model.rotary_emb.inv_freq", DType::kF32, {8}});
  r = MapHfToKeys(*m, hf, vars);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("inv_freq"), std::string::npos);
  hf.pop_back();
  r = MapHfToKeys(*m, hf, {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("num_attention_heads"), std::string::npos);
}

// Megatron pads the vocabulary for TP; export cuts it back to vocab_size.
TEST(HfMapping, RowsCutVocabularyPadding) {
  Result<HfMapping> m = ParseHfMapping(
      R"({"rules": [{"sp": "emb", "hf": "embed", "split": "vocab", "rows": "vocab_size"}]})");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const std::vector<HfMeta> keys = {{"emb", DType::kBF16, {12, 4}}};
  Result<std::vector<MappedKey>> mk = MapKeysToHf(*m, keys, {{"vocab_size", 10}});
  ASSERT_TRUE(mk.ok()) << mk.status().ToString();
  ASSERT_EQ(mk->size(), 1u);
  EXPECT_EQ((*mk)[0].info.shape, (Shape{12, 4}));
  ASSERT_EQ((*mk)[0].hf_tensors.size(), 1u);
  EXPECT_EQ((*mk)[0].hf_tensors[0].shape, (Shape{10, 4}));
  ASSERT_EQ((*mk)[0].pieces.size(), 1u);
  EXPECT_EQ((*mk)[0].pieces[0].box, (Box{{0, 0}, {10, 4}}));
  // Without the variable (no vocab_size in config.json, or a typo in the
  // rule): an error saying how to pass it, never the padded rows kept.
  mk = MapKeysToHf(*m, keys, {{"vocab_sise", 10}});
  ASSERT_FALSE(mk.ok());
  EXPECT_EQ(mk.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(
      mk.status().message(),
      "key 'emb' [12, 4]: \"rows\" variable 'vocab_size' is not defined (not in "
      "config.json, a Megatron checkpoint's args, the mapping's variables or the explicit "
      "variables), so the padding rows cannot be cut: pass the true size with --set vocab_size=N "
      "(ExportHfOptions::variables from C++); N = 12 keeps every row");
  // A literal row count needs no variable.
  Result<HfMapping> lit =
      ParseHfMapping(R"({"rules": [{"sp": "emb", "hf": "embed", "split": "vocab", "rows": 11}]})");
  ASSERT_TRUE(lit.ok()) << lit.status().ToString();
  mk = MapKeysToHf(*lit, keys, {});
  ASSERT_TRUE(mk.ok()) << mk.status().ToString();
  EXPECT_EQ((*mk)[0].hf_tensors[0].shape, (Shape{11, 4}));
  // Fewer rows than the vocabulary: an error naming the key.
  mk = MapKeysToHf(*m, keys, {{"vocab_size", 13}});
  ASSERT_FALSE(mk.ok());
  EXPECT_EQ(mk.status().message(),
            "key 'emb' [12, 4]: \"rows\" vocab_size = 13 is more than the key has (12)");
  // The HF -> shardpoint direction is unchanged: the key takes the HF shape.
  Result<std::vector<MappedKey>> back =
      MapHfToKeys(*m, {{"embed", DType::kBF16, {10, 4}}}, {{"vocab_size", 10}});
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ((*back)[0].info.shape, (Shape{10, 4}));
}

TEST(HfMapping, ConfigVariables) {
  HfMapping m;
  m.variables = {{"x", 1}, {"num_attention_heads", 2}};
  Result<Vars> v = ResolveVars(m, R"({"num_attention_heads": 16, "name": "llama"})", {{"x", 5}});
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->at("num_attention_heads"), 16);
  EXPECT_EQ(v->at("num_key_value_heads"), 16);
  EXPECT_EQ(v->at("x"), 5);
  EXPECT_FALSE(ResolveVars(m, "[1", {}).ok());
}

// A Megatron torch_dist checkpoint's args (common.pt, as dcp_dir.cc renders
// it): integers under their own names plus the HF names; num_query_groups
// counts only with group_query_attention; config.json and explicit
// variables win over them, they win over the mapping's defaults.
TEST(HfMapping, MegatronArgsVariables) {
  auto md = [](const std::string& state) {
    return R"({"megatron_torch_dist": {"common.pt": {"iteration": 3, "args": )"
           R"({"__class__": "argparse.Namespace", "state": )" +
           state + "}}}}";
  };
  Vars v = MegatronArgsVars(
      md(R"({"num_layers": 4, "num_attention_heads": 8, "group_query_attention": true,)"
         R"( "num_query_groups": 2, "ffn_hidden_size": 32, "kv_channels": 16, "vocab_size": 100,)"
         R"( "padded_vocab_size": 128, "num_experts": 4, "moe_ffn_hidden_size": 8, "lr": 0.1,)"
         R"( "swiglu": true, "seq_length": null})"));
  EXPECT_EQ(v, (Vars{{"num_layers", 4},
                     {"num_hidden_layers", 4},
                     {"num_attention_heads", 8},
                     {"num_query_groups", 2},
                     {"num_key_value_heads", 2},
                     {"ffn_hidden_size", 32},
                     {"intermediate_size", 32},
                     {"kv_channels", 16},
                     {"head_dim", 16},
                     {"vocab_size", 100},
                     {"padded_vocab_size", 128},
                     {"num_experts", 4},
                     {"moe_ffn_hidden_size", 8},
                     {"moe_intermediate_size", 8}}));
  // Without group_query_attention Megatron ignores num_query_groups (1 by default).
  v = MegatronArgsVars(md(R"({"num_attention_heads": 8, "num_query_groups": 1})"));
  EXPECT_EQ(v.at("num_key_value_heads"), 8);
  EXPECT_TRUE(MegatronArgsVars(md(R"({"__class__": "x"})")).count("num_key_value_heads") == 0);
  EXPECT_TRUE(MegatronArgsVars(R"({"megatron_torch_dist": {"common.pt": {"args": 3}}})").empty());
  EXPECT_TRUE(MegatronArgsVars("").empty());
  EXPECT_TRUE(MegatronArgsVars("[").empty());

  HfMapping m;
  m.variables = {{"x", 1}, {"vocab_size", 7}};
  Result<Vars> r = ResolveVars(m, R"({"num_attention_heads": 16})", {{"num_layers", 9}},
                               {{"x", 2}, {"num_attention_heads", 8}, {"num_layers", 4}});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->at("x"), 2);
  EXPECT_EQ(r->at("vocab_size"), 7);
  EXPECT_EQ(r->at("num_attention_heads"), 16);
  EXPECT_EQ(r->at("num_layers"), 9);
}

}  // namespace
}  // namespace shardpoint
