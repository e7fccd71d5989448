// ShippedHfMapping: the rules/*.json files built into the library.
#include "src/hf/shipped_rules.h"

#include "shardpoint/hf_rules.h"

namespace shardpoint {

std::vector<std::string> ShippedHfMappingNames() {
  std::vector<std::string> names;
  for (size_t i = 0; i < internal_hf::kNumShippedRules; ++i) {
    names.push_back(internal_hf::kShippedRules[i].name);
  }
  return names;
}

Result<HfMapping> ShippedHfMapping(const std::string& name) {
  for (size_t i = 0; i < internal_hf::kNumShippedRules; ++i) {
    if (name == internal_hf::kShippedRules[i].name) {
      return ParseHfMapping(internal_hf::kShippedRules[i].json,
                            "rules/" + name + ".json (built in)");
    }
  }
  std::string known;
  for (const std::string& n : ShippedHfMappingNames()) known += (known.empty() ? "" : ", ") + n;
  return NotFoundError("no shipped mapping named '" + name + "' (shipped: " + known + ")");
}

}  // namespace shardpoint
