// plan_scale_sampled's model of Save's commit (src/checkpoint/owner_commit.h):
// what each rank sends the keys' owners and rank 0, and the shards the
// owners write, from a sampled rank's LocalPlan and the modelled manifest.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "src/checkpoint/checksum_message.h"
#include "src/checkpoint/owner_commit.h"
#include "src/format/manifest.h"
#include "src/format/manifest_index.h"
#include "src/plan/dist_plan.h"

namespace plan_scale {

// One rank's commit messages, exact but for its part from the owners' side
// (OwnerSplit): to the owners (4a) and to rank 0 (4c, with the gather's
// status byte).
struct RankCommit {
  uint64_t to_owners = 0, to_rank0 = 0;
};

inline RankCommit CommitOf(const shardpoint::internal_plan::LocalPlan& lp) {
  const uint64_t bs = shardpoint::internal_format::kDefaultBlockSize;
  std::map<int, std::pair<std::vector<uint64_t>, std::vector<std::vector<uint64_t>>>> sums;
  for (size_t i = 0; i < lp.item_owner.size(); ++i) {
    auto& g = sums[lp.item_owner[i]];
    g.first.push_back(0);
    const auto& item = lp.file.items[i];
    g.second.emplace_back(item.is_object ? 0 : (item.nbytes + bs - 1) / bs);
  }
  RankCommit c;
  std::map<int, uint64_t> structure;
  for (const auto& [o, st] : lp.owner_structures) structure[o] = st.size();
  for (const auto& [o, g] : sums) {
    if (o < 0) continue;
    c.to_owners += 1 + 8 + structure[o] + 8 +
                   shardpoint::internal_checkpoint::EncodeChecksums(g.first, g.second).size() + 8;
  }
  auto objects = sums.find(-1);
  const uint64_t object_sums =
      objects == sums.end()
          ? 16
          : shardpoint::internal_checkpoint::EncodeChecksums(objects->second.first, {}).size();
  // status, object structure, object checksums, report, kind, part (its
  // length only), bytes, wrote, chunks.
  c.to_rank0 = 1 + 8 + lp.object_structure.size() + 8 + object_sums + 8 + 1 + 8 + 8 + 1 + 8;
  return c;
}

struct OwnerSplitResult {
  shardpoint::internal_format::SplitResult split;  // the index a load reads, shards in its order
  uint64_t parts_to_rank0 = 0;                     // the owners' parts rank 0 receives
  size_t owners = 0, sharding_owners = 0;          // owning keys; writing shards
  uint64_t largest_file = 0;                       // of an owner's shards
  std::vector<double> owner_inbox;                 // per owner of keys: 4a bytes (estimated)
};

inline size_t VarintSize(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) v >>= 7, ++n;
  return n;
}

// The owners' records (KeyOwner of each key of `whole`) as Save's commit
// handles them: inline to rank 0 when their v2 size is within threshold /
// world (rank 0's own always), else cut into data/manifest.<o>.shards;
// rank 0 shards what it received with the objects into data/manifest.shards.
inline OwnerSplitResult OwnerSplit(const shardpoint::internal_format::Manifest& whole, int world,
                                   uint64_t threshold, uint64_t shard_bytes, uint64_t part_bytes) {
  using shardpoint::internal_format::Manifest;
  namespace f = shardpoint::internal_format;
  OwnerSplitResult out;
  std::map<int, Manifest> owned;
  std::map<int, std::unordered_map<uint32_t, uint32_t>> files;
  for (const f::TensorRecord& t : whole.tensors) {
    const int o = shardpoint::internal_plan::KeyOwner(t.key, world);
    Manifest& m = owned[o];
    auto& local = files[o];
    f::TensorRecord r = t;
    for (f::ChunkRecord& c : r.chunks) {
      auto [it, fresh] = local.try_emplace(c.file, static_cast<uint32_t>(m.files.size()));
      if (fresh) m.files.push_back(whole.files[c.file]);
      c.file = it->second;
    }
    m.tensors.push_back(std::move(r));
  }
  Manifest rank0;
  rank0.objects = whole.objects;
  rank0.files = whole.files;  // objects keep their numbering; files no record names are dropped
  std::unordered_map<std::string, uint32_t> rank0_file;
  for (size_t i = 0; i < whole.files.size(); ++i) {
    rank0_file.emplace(whole.files[i], static_cast<uint32_t>(i));
  }
  std::vector<f::ManifestIndex> parts;
  std::vector<std::vector<std::string>> shards;
  for (auto& [o, m] : owned) {
    ++out.owners;
    // 4a: per chunk an item (kind, key, chunk, offset, size) and its checksums.
    double inbox = 0;
    for (const f::TensorRecord& t : m.tensors) {
      for (size_t i = 0; i < t.chunks.size(); ++i) {
        const f::ChunkRecord& c = t.chunks[i];
        inbox += 1 + 2 + VarintSize(i) + VarintSize(c.offset) + VarintSize(c.nbytes) + 8 + 8 +
                 8 * c.block_sums.size();
      }
      inbox += 4 + t.key.size();  // the key, interned once per writer (at least once)
    }
    out.owner_inbox.push_back(inbox + 70.0 * m.files.size());  // per writer: headers
    const std::string v2 = EncodeManifest(m);
    if (shardpoint::internal_checkpoint::SendsRecords(o, world, v2.size(), threshold)) {
      out.parts_to_rank0 += v2.size();
      for (f::TensorRecord& t : m.tensors) {
        for (f::ChunkRecord& c : t.chunks) c.file = rank0_file.at(m.files[c.file]);
        rank0.tensors.push_back(std::move(t));
      }
      continue;
    }
    ++out.sharding_owners;
    f::SplitResult s = f::SplitManifest(m, shard_bytes, part_bytes, static_cast<uint32_t>(o));
    uint64_t size = 0;
    for (const std::string& b : s.shards) size += b.size();
    out.largest_file = std::max(out.largest_file, size);
    out.parts_to_rank0 += f::EncodeIndex(s.index).size();
    parts.push_back(std::move(s.index));
    shards.push_back(std::move(s.shards));
  }
  std::sort(rank0.tensors.begin(), rank0.tensors.end(),
            [](const f::TensorRecord& a, const f::TensorRecord& b) { return a.key < b.key; });
  f::SplitResult mine = f::SplitManifest(rank0, shard_bytes, part_bytes);
  parts.insert(parts.begin(), std::move(mine.index));
  shards.insert(shards.begin(), std::move(mine.shards));
  auto combined = f::CombineIndexes(std::move(parts));
  if (!combined.ok()) {
    std::fprintf(stderr, "CombineIndexes: %s\n", combined.status().ToString().c_str());
    std::exit(1);
  }
  out.split.index = std::move(*combined);
  for (auto& s : shards) {
    for (std::string& b : s) out.split.shards.push_back(std::move(b));
  }
  return out;
}

}  // namespace plan_scale
