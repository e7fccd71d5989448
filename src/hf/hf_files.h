// Planning the files of an HF model: tensors (in the given order) packed into
// shards of at most max_shard_size data bytes (a tensor larger than that gets
// a shard of its own), headers encoded, the index JSON.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "src/format/safetensors.h"
#include "src/hf/mapping.h"

namespace shardpoint::internal_hf {

// The index of a sharded model, and the one file of an unsharded one.
inline constexpr char kHfIndexName[] = "model.safetensors.index.json";
inline constexpr char kHfSingleName[] = "model.safetensors";

struct HfFilePlan {
  std::string name;                                        // "model-00001-of-00003.safetensors"
  std::vector<internal_format::SafetensorsEntry> entries;  // offsets relative to the data region
  std::string header;                                      // 8-byte length + JSON (8-byte aligned)
  uint64_t data_bytes = 0;
};

struct HfModelPlan {
  std::vector<HfFilePlan> files;
  // Per input tensor: (file index, entry index).
  std::vector<std::pair<int, int>> where;
  std::string index_json;  // empty for a single file
};

HfModelPlan PlanHfModel(const std::vector<HfMeta>& tensors, uint64_t max_shard_size,
                        const std::map<std::string, std::string>& metadata);

}  // namespace shardpoint::internal_hf
