// Writing a Hugging Face safetensors model from in-memory tensors (small
// models, tests, fixtures).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "shardpoint/dtype.h"
#include "shardpoint/resources.h"
#include "shardpoint/status.h"
#include "shardpoint/storage.h"
#include "shardpoint/tensor.h"

namespace shardpoint {

// An in-memory HF tensor (for small models and tests).
struct HfTensor {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
  std::string bytes;  // row-major, numel * DTypeSize(dtype)
};

// Resources (resources.h): storage (the rest is not used).
struct HfWriteOptions : Resources {
  uint64_t max_shard_size = 5'000'000'000;  // bytes of tensor data per file
  std::map<std::string, std::string> metadata = {{"format", "pt"}};
  std::string config_json;  // written as config.json if not empty
};
// Writes a safetensors model: model.safetensors if it fits one shard, else
// model-0000i-of-0000N.safetensors and model.safetensors.index.json. Tensors
// are stored in natural name order (layer 2 before layer 10).
Status WriteHfModel(const std::string& dir, const std::vector<HfTensor>& tensors,
                    const HfWriteOptions& options = {});

}  // namespace shardpoint
