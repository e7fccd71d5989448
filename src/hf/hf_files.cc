#include "src/hf/hf_files.h"

#include <cstdio>
#include <nlohmann/json.hpp>

#include "shardpoint/hf_write.h"
#include "src/io/path.h"
#include "src/io/resources.h"

using shardpoint::internal_format::AssignSafetensorsOffsets;
using shardpoint::internal_format::EncodeSafetensorsHeader;
using shardpoint::internal_format::SafetensorsEntry;
using shardpoint::internal_hf::HfFilePlan;
using shardpoint::internal_hf::HfMeta;
using shardpoint::internal_hf::HfModelPlan;
using shardpoint::internal_hf::kHfIndexName;
using shardpoint::internal_hf::kHfSingleName;
using shardpoint::internal_hf::NaturalLess;
using shardpoint::internal_hf::PlanHfModel;
using shardpoint::internal_io::CallResources;
using shardpoint::internal_io::JoinPath;

namespace shardpoint::internal_hf {

HfModelPlan PlanHfModel(const std::vector<HfMeta>& tensors, uint64_t max_shard_size,
                        const std::map<std::string, std::string>& metadata) {
  HfModelPlan plan;
  std::vector<std::vector<SafetensorsEntry>> shards(1);
  uint64_t size = 0;
  for (const HfMeta& t : tensors) {
    uint64_t n = DTypeSize(t.dtype);
    for (int64_t d : t.shape) n *= static_cast<uint64_t>(d);
    if (!shards.back().empty() && size + n > max_shard_size) {
      shards.emplace_back();
      size = 0;
    }
    plan.where.emplace_back(static_cast<int>(shards.size() - 1),
                            static_cast<int>(shards.back().size()));
    shards.back().push_back({t.name, t.dtype, t.shape, 0, 0});
    size += n;
  }
  const size_t count = shards.size();
  nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
  uint64_t total = 0;
  for (size_t i = 0; i < count; ++i) {
    HfFilePlan f;
    char name[64];
    std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", i + 1, count);
    f.name = count == 1 ? kHfSingleName : name;
    f.entries = std::move(shards[i]);
    f.data_bytes = AssignSafetensorsOffsets(&f.entries);
    f.header = EncodeSafetensorsHeader(f.entries, metadata, 8);
    total += f.data_bytes;
    for (const SafetensorsEntry& e : f.entries) weight_map[e.name] = f.name;
    plan.files.push_back(std::move(f));
  }
  if (count > 1) {
    nlohmann::ordered_json index;
    index["metadata"] = {{"total_size", total}};
    index["weight_map"] = std::move(weight_map);
    plan.index_json = index.dump(2) + "\n";
  }
  return plan;
}

}  // namespace shardpoint::internal_hf

namespace shardpoint {

Status WriteHfModel(const std::string& dir, const std::vector<HfTensor>& tensors,
                    const HfWriteOptions& options) {
  Storage* storage = CallResources(options).storage();
  std::vector<HfMeta> metas;
  for (const HfTensor& t : tensors) {
    SP_ASSIGN_OR_RETURN(int64_t numel, CheckedNumElements(t.shape));
    if (t.bytes.size() != static_cast<uint64_t>(numel) * DTypeSize(t.dtype)) {
      return InvalidArgumentError("HF tensor '" + t.name + "': " + std::to_string(t.bytes.size()) +
                                  " bytes for " + std::string(DTypeName(t.dtype)) + " " +
                                  ShapeToString(t.shape));
    }
    metas.push_back({t.name, t.dtype, t.shape});
  }
  std::vector<size_t> order(tensors.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return NaturalLess(metas[a].name, metas[b].name); });
  std::vector<HfMeta> sorted;
  for (size_t i : order) sorted.push_back(metas[i]);
  HfModelPlan plan = PlanHfModel(sorted, options.max_shard_size, options.metadata);
  SP_RETURN_IF_ERROR(storage->CreateDirs(dir));
  for (size_t f = 0; f < plan.files.size(); ++f) {
    const HfFilePlan& fp = plan.files[f];
    SP_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> file,
                        storage->NewWritableFile(JoinPath(dir, fp.name), {}));
    SP_RETURN_IF_ERROR(file->WriteAt(0, fp.header.data(), fp.header.size()));
    for (size_t k = 0; k < sorted.size(); ++k) {
      if (plan.where[k].first != static_cast<int>(f)) continue;
      const SafetensorsEntry& e = fp.entries[plan.where[k].second];
      const std::string& bytes = tensors[order[k]].bytes;
      if (!bytes.empty()) {
        SP_RETURN_IF_ERROR(file->WriteAt(fp.header.size() + e.begin, bytes.data(), bytes.size()));
      }
    }
    SP_RETURN_IF_ERROR(file->Truncate(fp.header.size() + fp.data_bytes));
    SP_RETURN_IF_ERROR(file->Sync());
    SP_RETURN_IF_ERROR(file->Close());
  }
  if (!plan.index_json.empty()) {
    SP_RETURN_IF_ERROR(storage->WriteStringToFile(JoinPath(dir, kHfIndexName), plan.index_json));
  }
  if (!options.config_json.empty()) {
    SP_RETURN_IF_ERROR(
        storage->WriteStringToFile(JoinPath(dir, "config.json"), options.config_json));
  }
  return OkStatus();
}

}  // namespace shardpoint
