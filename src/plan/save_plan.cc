#include "src/plan/save_plan.h"

#include <algorithm>
#include <map>
#include <unordered_map>

#include "src/format/safetensors.h"
#include "src/plan/tiling.h"

using shardpoint::internal_format::ChunkRecord;
using shardpoint::internal_format::EncodeDataFileHeader;
using shardpoint::internal_format::kDataDir;
using shardpoint::internal_format::Manifest;
using shardpoint::internal_format::ObjectRecord;
using shardpoint::internal_format::SafetensorsEntry;
using shardpoint::internal_format::TensorRecord;

namespace shardpoint::internal_plan {
namespace {

struct Holder {
  int rank;
  int64_t source;  // region or object index on that rank
};

struct KeyGroup {
  const RegionDesc* first = nullptr;
  int first_rank = 0;
  struct Entry {
    const Box* box;
    Holder holder;
  };
  std::vector<Entry> entries;
};

// One stored piece (tensor chunk or object) and who could write it.
struct Piece {
  bool is_object;
  int64_t record;
  int64_t chunk;
  uint64_t nbytes;
  std::vector<Holder> holders;  // sorted by rank, one per rank
};

std::string Describe(const RegionDesc& r) {
  return std::string(DTypeName(r.dtype)) + " " + ShapeToString(r.global_shape);
}

Status GroupRegions(const std::vector<Contribution>& ranks,
                    std::unordered_map<std::string, KeyGroup>* groups) {
  for (size_t r = 0; r < ranks.size(); ++r) {
    const auto& regions = ranks[r].regions;
    for (size_t i = 0; i < regions.size(); ++i) {
      const RegionDesc& rd = regions[i];
      Status s = ValidateBoxInShape(rd.box, rd.global_shape);
      if (!s.ok()) return s.WithContext("rank " + std::to_string(r) + ", tensor '" + rd.key + "'");
      KeyGroup& g = (*groups)[rd.key];
      if (g.first == nullptr) {
        g.first = &rd;
        g.first_rank = static_cast<int>(r);
      } else if (g.first->dtype != rd.dtype || g.first->global_shape != rd.global_shape) {
        return InvalidArgumentError("tensor '" + rd.key + "': rank " +
                                    std::to_string(g.first_rank) + " has " + Describe(*g.first) +
                                    " but rank " + std::to_string(r) + " has " + Describe(rd));
      }
      if (!rd.box.empty()) {
        g.entries.push_back({&rd.box, Holder{static_cast<int>(r), static_cast<int64_t>(i)}});
      }
    }
  }
  return OkStatus();
}

// Deduplicates replicas of one key, checks the tiling and appends its record.
Status PlanTensor(const std::string& key, KeyGroup& g, Manifest* m, std::vector<Piece>* pieces) {
  std::sort(g.entries.begin(), g.entries.end(), [](const auto& a, const auto& b) {
    if (*a.box != *b.box) return *a.box < *b.box;
    return a.holder.rank < b.holder.rank;
  });
  TensorRecord rec{key, g.first->dtype, g.first->global_shape, {}};
  std::vector<Box> held;
  std::vector<Piece> mine;
  const int64_t record = static_cast<int64_t>(m->tensors.size());
  for (size_t i = 0; i < g.entries.size(); ++i) {
    const auto& e = g.entries[i];
    if (i > 0 && *g.entries[i - 1].box == *e.box) {
      if (g.entries[i - 1].holder.rank != e.holder.rank) {
        mine.back().holders.push_back(e.holder);
      }
      continue;
    }
    held.push_back(*e.box);
    uint64_t nbytes = static_cast<uint64_t>(e.box->num_elements()) * DTypeSize(rec.dtype);
    mine.push_back(
        Piece{false, record, static_cast<int64_t>(rec.chunks.size()), nbytes, {e.holder}});
    rec.chunks.push_back(ChunkRecord{*e.box, 0, 0, nbytes, 0, {}});
  }
  SP_RETURN_IF_ERROR(CheckTiling(key, rec.shape, held, [&](size_t i) {
    std::vector<int> ranks;
    for (const Holder& h : mine[i].holders) ranks.push_back(h.rank);
    return RanksToString(ranks);
  }));
  m->tensors.push_back(std::move(rec));
  for (Piece& p : mine) pieces->push_back(std::move(p));
  return OkStatus();
}

Status PlanObjects(const std::vector<Contribution>& ranks, Manifest* m,
                   std::vector<Piece>* pieces) {
  std::map<std::pair<std::string, Shape>, Piece> by_id;
  std::map<std::pair<std::string, Shape>, const ObjectDesc*> first;
  for (size_t r = 0; r < ranks.size(); ++r) {
    for (size_t i = 0; i < ranks[r].objects.size(); ++i) {
      const ObjectDesc& o = ranks[r].objects[i];
      auto id = std::make_pair(o.key, o.index);
      Holder h{static_cast<int>(r), static_cast<int64_t>(i)};
      auto [it, fresh] = by_id.try_emplace(id, Piece{true, 0, 0, o.nbytes, {h}});
      if (fresh) {
        first[id] = &o;
        continue;
      }
      const ObjectDesc& f = *first[id];
      if (f.grid != o.grid || f.nbytes != o.nbytes) {
        return InvalidArgumentError(
            "object '" + o.key + "' index " + ShapeToString(o.index) + ": rank " +
            std::to_string(it->second.holders.front().rank) + " has grid " + ShapeToString(f.grid) +
            " and " + std::to_string(f.nbytes) + " bytes but rank " + std::to_string(r) +
            " has grid " + ShapeToString(o.grid) + " and " + std::to_string(o.nbytes) + " bytes");
      }
      if (it->second.holders.back().rank != h.rank) it->second.holders.push_back(h);
    }
  }
  for (auto& [id, piece] : by_id) {
    const ObjectDesc& f = *first[id];
    piece.record = static_cast<int64_t>(m->objects.size());
    m->objects.push_back(ObjectRecord{f.key, f.index, f.grid, 0, 0, f.nbytes, 0});
    pieces->push_back(std::move(piece));
  }
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
