// One loading rank's partial manifest read, for both planning benches: the
// shards of its keys merged into a manifest, and the load planned from it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "bench/plan_scale_model.h"
#include "src/format/manifest.h"
#include "src/format/manifest_index.h"
#include "src/plan/load_plan.h"
#include "src/plan/regions.h"

namespace plan_scale {

struct PartialLoad {
  std::vector<uint32_t> shards;  // the manifest shards the rank reads
  uint64_t read = 0;             // their bytes
  uint64_t need_bytes = 0;       // the encoded records of the rank's keys
  double decode_s = 0, plan_s = 0;
  double ratio() const { return double(read) / double(need_bytes); }
};

// Reads the shards of the keys of `regions`, merges them and plans the load
// from them; dies unless that plan equals `whole_plan` (made from `whole`).
inline PartialLoad LoadFromKeyShards(const internal_format::Manifest& whole,
                                     const internal_format::ManifestIndex& index,
                                     const internal_format::SplitResult& split,
                                     const std::vector<internal_plan::Region>& regions,
                                     const internal_plan::LoadPlan& whole_plan) {
  using internal_format::EncodeManifest;
  using internal_format::Manifest;
  std::vector<std::string> names;
  for (const internal_plan::Region& g : regions) names.push_back(g.desc.key);
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  Manifest need;
  for (const std::string& k : names) need.tensors.push_back(whole.tensors[whole.FindTensor(k)]);
  PartialLoad out;
  out.need_bytes = EncodeManifest(need).size() - EncodeManifest(Manifest{}).size();
  out.shards = internal_format::ShardsForKeys(index, names, {});
  std::vector<std::pair<uint32_t, std::string>> have;
  for (uint32_t sh : out.shards) {
    have.emplace_back(sh, split.shards[sh]);
    out.read += split.shards[sh].size();
  }
  const double d = Now();
  Manifest part = Check(internal_format::MergeShards(index, have, "bench"), "MergeShards");
  const double e = Now();
  internal_plan::LoadPlan lp = Check(internal_plan::PlanLoad(part, regions), "PlanLoad");
  const double f = Now();
  if (lp.bytes != whole_plan.bytes || lp.pieces.size() != whole_plan.pieces.size()) {
    Die("partial plan differs");
  }
  out.decode_s = e - d;
  out.plan_s = f - e;
  return out;
}

}  // namespace plan_scale
