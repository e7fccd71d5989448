#include "src/plan/key_group.h"

#include <algorithm>

#include "src/plan/tiling.h"

using shardpoint::internal_format::ChunkRecord;
using shardpoint::internal_format::Manifest;
using shardpoint::internal_format::ObjectRecord;
using shardpoint::internal_format::TensorRecord;

namespace shardpoint::internal_plan {
namespace {

std::string Describe(const RegionDesc& r) {
  return std::string(DTypeName(r.dtype)) + " " + ShapeToString(r.global_shape);
}

}  // namespace

Status AddRegion(const RegionDesc& rd, int rank, int64_t source, KeyGroup* g) {
  Status s = ValidateBoxInShape(rd.box, rd.global_shape);
  if (!s.ok()) return s.WithContext("rank " + std::to_string(rank) + ", tensor '" + rd.key + "'");
  if (g->first == nullptr) {
    g->first = &rd;
    g->first_rank = rank;
  } else if (g->first->dtype != rd.dtype || g->first->global_shape != rd.global_shape) {
    return InvalidArgumentError("tensor '" + rd.key + "': rank " + std::to_string(g->first_rank) +
                                " has " + Describe(*g->first) + " but rank " +
                                std::to_string(rank) + " has " + Describe(rd));
  }
  if (!rd.box.empty()) g->entries.push_back({&rd.box, Holder{rank, source}});
  return OkStatus();
}

Status PlanTensor(const std::string& key, KeyGroup& g, Manifest* m, std::vector<Piece>* pieces) {
  std::sort(g.entries.begin(), g.entries.end(), [](const auto& a, const auto& b) {
    if (*a.box != *b.box) return *a.box < *b.box;
    if (a.holder.rank != b.holder.rank) return a.holder.rank < b.holder.rank;
    return a.holder.source < b.holder.source;
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

Status AddObject(const ObjectDesc& o, int rank, int64_t source, ObjectGroups* groups) {
  ObjectGroups::Id id(o.key, o.index);
  Holder h{rank, source};
  auto [it, fresh] = groups->by_id.try_emplace(id, Piece{true, 0, 0, o.nbytes, {h}});
  if (fresh) {
    groups->first[id] = &o;
    return OkStatus();
  }
  const ObjectDesc& f = *groups->first[id];
  if (f.grid != o.grid || f.nbytes != o.nbytes) {
    return InvalidArgumentError(
        "object '" + o.key + "' index " + ShapeToString(o.index) + ": rank " +
        std::to_string(it->second.holders.front().rank) + " has grid " + ShapeToString(f.grid) +
        " and " + std::to_string(f.nbytes) + " bytes but rank " + std::to_string(rank) +
        " has grid " + ShapeToString(o.grid) + " and " + std::to_string(o.nbytes) + " bytes");
  }
  if (it->second.holders.back().rank != h.rank) it->second.holders.push_back(h);
  return OkStatus();
}

void FinishObjects(ObjectGroups& groups, Manifest* m, std::vector<Piece>* pieces) {
  for (auto& [id, piece] : groups.by_id) {
    const ObjectDesc& f = *groups.first[id];
    piece.record = static_cast<int64_t>(m->objects.size());
    m->objects.push_back(ObjectRecord{f.key, f.index, f.grid, 0, 0, f.nbytes, 0});
    pieces->push_back(std::move(piece));
  }
}

}  // namespace shardpoint::internal_plan
