#include "src/hf/megatron_vars.h"

#include <nlohmann/json.hpp>

namespace shardpoint::internal_hf {

Vars MegatronArgsVars(const std::string& metadata_json) {
  using Json = nlohmann::json;
  Vars v;
  if (metadata_json.empty()) return v;
  const Json md = Json::parse(metadata_json, nullptr, /*allow_exceptions=*/false);
  const Json::json_pointer where("/megatron_torch_dist/common.pt/args");
  if (md.is_discarded() || !md.contains(where)) return v;
  const Json& args = md.at(where);
  if (!args.is_object() || args.value("__class__", "") != "argparse.Namespace" ||
      !args.contains("state") || !args["state"].is_object()) {
    return v;
  }
  const Json& s = args["state"];
  for (auto it = s.begin(); it != s.end(); ++it) {
    if (it.value().is_number_integer()) v[it.key()] = it.value().get<int64_t>();
  }
  auto alias = [&v](const std::string& hf, const std::string& megatron) {
    auto it = v.find(megatron);
    if (it != v.end() && !v.count(hf)) v[hf] = it->second;
  };
  const bool gqa = s.contains("group_query_attention") && s["group_query_attention"] == true;
  alias("num_key_value_heads", gqa ? "num_query_groups" : "num_attention_heads");
  alias("num_hidden_layers", "num_layers");
  alias("intermediate_size", "ffn_hidden_size");
  alias("moe_intermediate_size", "moe_ffn_hidden_size");
  alias("head_dim", "kv_channels");
  return v;
}

}  // namespace shardpoint::internal_hf
