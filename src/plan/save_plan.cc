#include "src/plan/save_plan.h"

#include <algorithm>
#include <map>
#include <unordered_map>

#include "src/format/safetensors.h"
#include "src/plan/key_group.h"

using shardpoint::internal_format::ChunkRecord;
using shardpoint::internal_format::EncodeDataFileHeader;
using shardpoint::internal_format::kDataDir;
using shardpoint::internal_format::Manifest;
using shardpoint::internal_format::ObjectRecord;
using shardpoint::internal_format::SafetensorsEntry;
using shardpoint::internal_format::TensorRecord;

namespace shardpoint::internal_plan {
namespace {

Status GroupRegions(const std::vector<Contribution>& ranks,
                    std::unordered_map<std::string, KeyGroup>* groups) {
  for (size_t r = 0; r < ranks.size(); ++r) {
    const auto& regions = ranks[r].regions;
    for (size_t i = 0; i < regions.size(); ++i) {
      const RegionDesc& rd = regions[i];
      SP_RETURN_IF_ERROR(
          AddRegion(rd, static_cast<int>(r), static_cast<int64_t>(i), &(*groups)[rd.key]));
    }
  }
  return OkStatus();
}

Status PlanObjects(const std::vector<Contribution>& ranks, Manifest* m,
                   std::vector<Piece>* pieces) {
  ObjectGroups groups;
  for (size_t r = 0; r < ranks.size(); ++r) {
    for (size_t i = 0; i < ranks[r].objects.size(); ++i) {
      SP_RETURN_IF_ERROR(
          AddObject(ranks[r].objects[i], static_cast<int>(r), static_cast<int64_t>(i), &groups));
    }
  }
  FinishObjects(groups, m, pieces);
  return OkStatus();
}

// Largest first, to the least-loaded holder (lowest rank on ties). With
// `others`, the pieces' other holders are appended there, per rank.
std::vector<std::vector<const Piece*>> AssignWriters(const std::vector<Piece>& pieces, size_t n,
                                                     std::vector<RankFile>* others) {
  std::vector<const Piece*> order;
  order.reserve(pieces.size());
  for (const Piece& p : pieces) order.push_back(&p);
  std::stable_sort(order.begin(), order.end(),
                   [](const Piece* a, const Piece* b) { return a->nbytes > b->nbytes; });
  std::vector<uint64_t> load(n, 0);
  std::vector<std::vector<const Piece*>> per_rank(n);
  for (const Piece* p : order) {
    const Holder* best = &p->holders.front();
    for (const Holder& h : p->holders) {
      if (load[h.rank] < load[best->rank]) best = &h;
    }
    load[best->rank] += p->nbytes;
    per_rank[best->rank].push_back(p);
    if (!others) continue;
    for (const Holder& h : p->holders) {
      if (&h == best) continue;
      (*others)[h.rank].replicas.push_back(
          WriteItem{p->is_object, h.source, p->record, p->chunk, 0, p->nbytes});
    }
  }
  return per_rank;
}

}  // namespace

std::string ChunkEntryName(const std::string& key, int64_t chunk) {
  return key + "@" + std::to_string(chunk);
}

std::string ObjectEntryName(const ObjectRecord& o) {
  std::string name = o.key + "#obj";
  for (size_t i = 0; i < o.index.size(); ++i) name += (i ? "," : "") + std::to_string(o.index[i]);
  return name;
}

Result<SavePlan> PlanSave(const std::vector<Contribution>& ranks, bool list_replicas) {
  SavePlan plan;
  plan.lists_replicas = list_replicas;
  std::unordered_map<std::string, KeyGroup> groups;
  SP_RETURN_IF_ERROR(GroupRegions(ranks, &groups));
  std::vector<const std::string*> keys;
  keys.reserve(groups.size());
  for (const auto& [key, g] : groups) keys.push_back(&key);
  std::sort(keys.begin(), keys.end(), [](auto* a, auto* b) { return *a < *b; });

  std::vector<Piece> pieces;
  for (const std::string* key : keys) {
    SP_RETURN_IF_ERROR(PlanTensor(*key, groups[*key], &plan.manifest, &pieces));
  }
  SP_RETURN_IF_ERROR(PlanObjects(ranks, &plan.manifest, &pieces));

  plan.ranks.resize(ranks.size());
  std::vector<std::vector<const Piece*>> per_rank =
      AssignWriters(pieces, ranks.size(), list_replicas ? &plan.ranks : nullptr);
  for (size_t r = 0; r < ranks.size(); ++r) {
    auto& mine = per_rank[r];
    if (mine.empty()) continue;
    // File order: by element size, largest first (as the safetensors writer
    // does), so every chunk starts at a multiple of its element size; then
    // tensors by key and chunk, then objects.
    auto elem = [&](const Piece* p) -> size_t {
      return p->is_object ? 1 : DTypeSize(plan.manifest.tensors[p->record].dtype);
    };
    std::sort(mine.begin(), mine.end(), [&](const Piece* a, const Piece* b) {
      size_t ea = elem(a), eb = elem(b);
      return std::tie(eb, a->is_object, a->record, a->chunk) <
             std::tie(ea, b->is_object, b->record, b->chunk);
    });
    RankFile& rf = plan.ranks[r];
    rf.file = static_cast<int32_t>(plan.manifest.files.size());
    plan.manifest.files.push_back(std::string(kDataDir) + "/" + std::to_string(r) + ".safetensors");
    std::vector<SafetensorsEntry> entries;
    uint64_t pos = 0;
    for (const Piece* p : mine) {
      int64_t source = 0;
      for (const Holder& h : p->holders) {
        if (h.rank == static_cast<int>(r)) source = h.source;
      }
      if (p->is_object) {
        const ObjectRecord& o = plan.manifest.objects[p->record];
        entries.push_back({ObjectEntryName(o),
                           DType::kU8,
                           {static_cast<int64_t>(p->nbytes)},
                           pos,
                           pos + p->nbytes});
      } else {
        const TensorRecord& t = plan.manifest.tensors[p->record];
        entries.push_back({ChunkEntryName(t.key, p->chunk), t.dtype, t.chunks[p->chunk].box.shape,
                           pos, pos + p->nbytes});
      }
      rf.items.push_back(WriteItem{p->is_object, source, p->record, p->chunk, pos, p->nbytes});
      pos += p->nbytes;
    }
    rf.header = EncodeDataFileHeader(entries);
    for (WriteItem& item : rf.items) {
      item.offset += rf.header.size();
      if (item.is_object) {
        ObjectRecord& o = plan.manifest.objects[item.record];
        o.file = rf.file, o.offset = item.offset;
      } else {
        ChunkRecord& c = plan.manifest.tensors[item.record].chunks[item.chunk];
        c.file = rf.file, c.offset = item.offset;
      }
    }
    rf.size = rf.header.size() + pos;
    plan.total_bytes += pos;
  }
  return plan;
}

}  // namespace shardpoint::internal_plan
