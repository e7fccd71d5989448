// One loading rank's partial manifest read, for both planning benches: the
// shards of its keys (of a key cut into parts, the parts whose span meets
// its boxes: ShardsForBoxes, as Load asks) merged into a manifest, and the
// load planned from it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
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
  std::vector<uint32_t> shards;     // the manifest shards the rank reads
  uint64_t read = 0;                // their bytes
  uint64_t need_bytes = 0;          // the encoded records of the rank's keys
  uint64_t overlap_bytes = 0;       // of those, the chunks overlapping its boxes
  double decode_s = 0, plan_s = 0;  // decode_s: DecodeIndex (its keys kept) + MergeShards
  double index_s = 0;               // of decode_s: DecodeIndex
  size_t num_keys = 0;              // the tensor keys it requests
  std::vector<std::pair<uint32_t, std::string>> have;  // the shards read (for --rank-dir)
  double ratio() const { return double(read) / double(need_bytes); }
};

// As Load: decodes `index_bytes` keeping the entries of the keys of
// `regions`, reads their shards, merges them and plans the load from them;
// dies unless that plan equals `whole_plan` (made from `whole`).
inline PartialLoad LoadFromKeyShards(const internal_format::Manifest& whole,
                                     const std::string& index_bytes,
                                     const internal_format::SplitResult& split,
                                     const std::vector<internal_plan::Region>& regions,
                                     const internal_plan::LoadPlan& whole_plan) {
  using internal_format::EncodeManifest;
  using internal_format::Manifest;
  std::map<std::string, std::vector<Box>> boxes;
  for (const internal_plan::Region& g : regions) boxes[g.desc.key].push_back(g.desc.box);
  std::vector<internal_format::KeyBoxes> want;
  Manifest need, overlap;
  for (auto& [k, b] : boxes) {
    const internal_format::TensorRecord& t = whole.tensors[whole.FindTensor(k)];
    need.tensors.push_back(t);
    internal_format::TensorRecord& o = overlap.tensors.emplace_back(t);
    o.chunks.clear();
    for (const internal_format::ChunkRecord& c : t.chunks) {
      for (const Box& x : b) {
        std::optional<Box> both = Intersect(c.box, x);
        if (both && !both->empty()) {
          o.chunks.push_back(c);
          break;
        }
      }
    }
    want.push_back({k, std::move(b)});
  }
  PartialLoad out;
  const size_t empty = EncodeManifest(Manifest{}).size();
  out.need_bytes = EncodeManifest(need).size() - empty;
  out.overlap_bytes = EncodeManifest(overlap).size() - empty;
  std::vector<std::string> keys;
  for (const internal_format::KeyBoxes& kb : want) keys.push_back(kb.key);
  out.num_keys = keys.size();
  const internal_format::IndexKeep keep{&keys, 1, 0};
  {
    // The shards it gets, copied before the clock starts (Load receives them).
    internal_format::ManifestIndex pre =
        Check(internal_format::DecodeIndex(index_bytes, "bench", &keep), "DecodeIndex");
    out.shards = internal_format::ShardsForBoxes(pre, want, {});
  }
  std::vector<std::pair<uint32_t, std::string>> have;
  for (uint32_t sh : out.shards) {
    have.emplace_back(sh, split.shards[sh]);
    out.read += split.shards[sh].size();
  }
  const double d = Now();
  internal_format::ManifestIndex index =
      Check(internal_format::DecodeIndex(index_bytes, "bench", &keep), "DecodeIndex");
  const double d1 = Now();
  if (internal_format::ShardsForBoxes(index, want, {}) != out.shards) Die("shards differ");
  // Only the chunks meeting this rank's boxes are kept.
  Manifest part =
      Check(internal_format::MergeShards(std::move(index), have, "bench", &want), "MergeShards");
  const double e = Now();
  const double p0 = Now();
  internal_plan::LoadPlan lp = Check(internal_plan::PlanLoad(part, regions), "PlanLoad");
  const double f = Now();
  if (lp.bytes != whole_plan.bytes || lp.pieces.size() != whole_plan.pieces.size()) {
    Die("partial plan differs");
  }
  out.decode_s = e - d;
  out.index_s = d1 - d;
  out.plan_s = f - p0;
  out.have = std::move(have);
  return out;
}

}  // namespace plan_scale
