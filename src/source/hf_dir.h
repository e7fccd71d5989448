// An HF model directory: its safetensors files, their headers, config.json
// (the door opens an HF model through it: src/source/mapped_source.h).
//
// Files come from model.safetensors.index.json when present (its weight_map
// must agree with the headers), else every *.safetensors in the directory,
// unless one is named as a shard ("model-00001-of-00003.safetensors"):
// shards without their index are refused (FailedPrecondition naming the
// index), as an export or download that did not finish.
// Rank 0 reads the raw headers (ReadHfHeaders) and broadcasts them; every
// rank decodes and validates them (DecodeHfHeaders).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "shardpoint/storage.h"
#include "src/hf/hf_files.h"
#include "src/hf/mapping.h"

namespace shardpoint::internal_source {

struct HfDirIndex {
  struct Tensor {
    internal_hf::HfMeta meta;
    uint32_t file = 0;
    uint64_t offset = 0;  // absolute, in the file
    uint64_t nbytes = 0;
  };
  std::vector<std::string> files;  // names relative to the directory
  std::vector<Tensor> tensors;     // sorted by name
  std::string config_json;         // empty if there is no config.json
};

// The raw bytes (file names, sizes, JSON headers, config.json) in one blob.
Result<std::string> ReadHfHeaders(Storage* storage, const std::string& dir);
Result<HfDirIndex> DecodeHfHeaders(std::string_view blob, const std::string& dir);
Result<HfDirIndex> ScanHfDir(Storage* storage, const std::string& dir);

}  // namespace shardpoint::internal_source
