// Mapping rules applied to names and shapes, both ways: HF tensors ->
// shardpoint keys (load, convert, diff) and shardpoint keys -> HF tensors
// (export). Every mapped key is a list of pieces; a piece is a box of the
// global tensor whose row-major elements are a contiguous run of one HF
// tensor. Pure functions.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "shardpoint/hf_keys.h"
#include "shardpoint/hf_mapping.h"
#include "src/hf/pattern.h"

namespace shardpoint::internal_hf {

using Vars = std::map<std::string, int64_t>;

struct HfMeta {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
};

struct HfPiece {
  std::string hf;         // HF tensor name
  int64_t hf_offset = 0;  // first element of the run in the HF tensor
  Box box;                // in the shardpoint tensor; its elements, row-major, are the run
};

struct MappedKey {
  HfKeyInfo info;
  std::vector<HfPiece> pieces;     // tile info.shape
  std::vector<HfMeta> hf_tensors;  // the HF tensors it is made of, in rule order
};

// How a rule's HF parts make the key ("fuse" in mapping files).
enum class HfFuse { kConcat, kGqa };
// A rule's layout hint ("split"; HfShard, include/shardpoint/hf.h).
enum class HfSplit {
  kReplicated,
  kColumn,
  kRow,
  kVocab,
  kSwiglu,
  kGqa,
  kExpertsSwiglu,
  kExpertsRow,
  kExpertsColumn,
};
// The kinds as mapping files spell them; nullopt for any other string. The
// strings are parsed here only (once per rule by CompileMapping, once per
// key by HfShard); everything else switches on the enums.
std::optional<HfFuse> ParseHfFuse(std::string_view s);
std::optional<HfSplit> ParseHfSplit(std::string_view s);

struct CompiledRule {
  HfRule rule;
  HfFuse fuse = HfFuse::kConcat;
  HfSplit split = HfSplit::kReplicated;
  NamePattern sp;
  std::vector<NamePattern> hf;
};
// Validates patterns and placeholders of every rule; errors name the rule.
Result<std::vector<CompiledRule>> CompileMapping(const HfMapping& mapping);

// Variables: the mapping's defaults, then `source_vars` (what the source
// itself says, e.g. a Megatron checkpoint's args: MegatronArgsVars), then
// integer fields of `config_json` (HF config.json; num_key_value_heads
// defaults to num_attention_heads), then `explicit_vars`.
Result<Vars> ResolveVars(const HfMapping& mapping, const std::string& config_json,
                         const Vars& explicit_vars, const Vars& source_vars = {});

// HF tensors -> shardpoint keys (sorted by key). Errors name the HF tensors.
Result<std::vector<MappedKey>> MapHfToKeys(const HfMapping& mapping, const std::vector<HfMeta>& hf,
                                           const Vars& vars);
// Shardpoint keys (as HfMeta: key, dtype, global shape) -> HF tensors; the
// result is in the order of `keys`.
Result<std::vector<MappedKey>> MapKeysToHf(const HfMapping& mapping,
                                           const std::vector<HfMeta>& keys, const Vars& vars);

// "a.2.b" < "a.10.b": digit runs compare as numbers.
bool NaturalLess(const std::string& a, const std::string& b);

}  // namespace shardpoint::internal_hf
