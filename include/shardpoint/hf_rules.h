// The HF mapping rules shipped with shardpoint: rules/<name>.json, built into
// the library, so a program finds them by name wherever it is installed.
//
//   llama     Llama / Qwen2 / Qwen3 dense decoders <-> Megatron-Core names
//   qwen_moe  Qwen2-MoE / Qwen3-MoE
#pragma once

#include <string>
#include <vector>

#include "shardpoint/hf_mapping.h"

namespace shardpoint {

// The shipped names, sorted ("llama", "qwen_moe").
std::vector<std::string> ShippedHfMappingNames();
// The shipped mapping `name`; NotFound listing the shipped names otherwise.
Result<HfMapping> ShippedHfMapping(const std::string& name);

}  // namespace shardpoint
