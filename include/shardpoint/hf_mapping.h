// Hugging Face mappings: which HF tensors make which shardpoint global tensor.
//
// A mapping (rules/*.json, docs/huggingface.md) holds renames with {layer} /
// {expert} placeholders, concatenations along a dim (SwiGLU gate + up), GQA
// interleaving (q, k, v -> Megatron linear_qkv) and stacking of per-expert
// tensors into one [E, ...] tensor. Shipped mappings: shardpoint/hf_rules.h.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "shardpoint/resources.h"
#include "shardpoint/status.h"
#include "shardpoint/storage.h"

namespace shardpoint {

// One rule: the shardpoint key `sp` is made of the HF tensors `hf` (patterns
// with {name} placeholders matching decimal numbers).
struct HfRule {
  std::string sp;
  std::vector<std::string> hf;  // one name: a rename; several: fused
  // "concat": the parts concatenated along `dim`; "gqa": q, k, v interleaved
  // per query group (Megatron linear_qkv), see docs/huggingface.md.
  std::string fuse = "concat";
  int dim = 0;
  // Concat part sizes along `dim` for export (ints or variable names); empty:
  // equal parts.
  std::vector<std::string> sizes;
  // gqa: number of query heads and of key/value groups (ints or variable names).
  std::string heads, groups;
  // Placeholders of `hf` absent from `sp` (usually {"expert"}, or {"layer"}
  // for Megatron's layers): the sp tensor stacks their values 0..N-1 along
  // new leading dims, the first placeholder outermost ({"layer", "expert"}:
  // [L, E, ...], Megatron MoE experts stacked under the layer dim).
  std::vector<std::string> stack;
  // Export only (a rename rule): the HF tensor holds the first `rows` rows of
  // the key (an int or a variable name, usually "vocab_size"): a Megatron
  // vocabulary padded for TP is cut back to the model's. Unset variable: all
  // rows. Empty: all rows.
  std::string rows;
  // Layout hint: "replicated", "column", "row", "vocab", "swiglu", "gqa",
  // "experts_swiglu", "experts_row", "experts_column" (see HfShard).
  std::string split = "replicated";
};

struct HfMapping {
  std::string name;
  std::vector<HfRule> rules;
  // Defaults for variables; HF config.json values and explicit variables win.
  std::map<std::string, int64_t> variables;
  // HF tensors no rule matches keep their name (true) or are an error (false).
  bool keep_unmatched = true;
  // Export only: keys starting with one of these prefixes are left out of the
  // HF model (e.g. "optimizer." in a Megatron checkpoint).
  std::vector<std::string> skip;
};

// Parses a mapping file's JSON; InvalidArgument naming `source` and the rule.
Result<HfMapping> ParseHfMapping(std::string_view json, const std::string& source = "<mapping>");
// Reads and parses the mapping file at `path` from resources.storage (the
// rest is not used); the Storage* overload is the same with only a storage
// (nullptr = DefaultStorage()).
Result<HfMapping> ReadHfMapping(const std::string& path, const Resources& resources);
Result<HfMapping> ReadHfMapping(const std::string& path, Storage* storage = nullptr);
// No rules: HF names are shardpoint keys.
inline HfMapping IdentityHfMapping() { return HfMapping{}; }

}  // namespace shardpoint
