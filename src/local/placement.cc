#include "src/local/placement.h"

#include <algorithm>
#include <set>

#include "src/local/overlay.h"

using shardpoint::internal_checkpoint::ChunkSpan;
using shardpoint::internal_checkpoint::DataFiles;
using shardpoint::internal_format::ChunkRecord;
using shardpoint::internal_format::Manifest;

namespace shardpoint::internal_local {

Placer::Placer(const Manifest& m, const UnitTable& ut, const internal_plan::LoadPlan& plan,
               Storage* storage, std::string dir, ThreadPool* pool,
               const internal_checkpoint::ReadOptions& options,
               internal_checkpoint::ReadStats* stats)
    : m_(m),
      ut_(ut),
      storage_(storage),
      dir_(std::move(dir)),
      pool_(pool),
      options_(options),
      stats_(stats),
      chunk_of_(ut.units.size(), {-1, -1}) {
  for (const internal_plan::ReadPiece& p : plan.pieces) pieces_[{p.tensor, p.chunk}].push_back(&p);
  for (size_t t = 0; t < m.tensors.size(); ++t) {
    for (size_t c = 0; c < m.tensors[t].chunks.size(); ++c) {
      const ChunkRecord& ch = m.tensors[t].chunks[c];
      if (ch.file >= m.files.size()) continue;
      const auto first = ut.units.begin() + ut.file_begin[ch.file];
      const auto last = ut.units.begin() + ut.file_begin[ch.file + 1];
      auto it = std::lower_bound(first, last, ch.offset,
                                 [](const Unit& u, uint64_t x) { return u.offset < x; });
      for (; it != last && it->offset < ch.offset + ch.nbytes; ++it) {
        chunk_of_[it - ut.units.begin()] = {static_cast<int64_t>(t), static_cast<int64_t>(c)};
      }
    }
  }
}

std::vector<ChunkSpan> Placer::Spans(const std::vector<uint32_t>& units) const {
  std::vector<ChunkSpan> spans;
  for (uint32_t u : units) {
    const auto [t, c] = chunk_of_[u];
    if (t < 0) continue;
    const uint64_t a = ut_.units[u].offset - m_.tensors[t].chunks[c].offset;
    spans.push_back({t, c, a, a + ut_.units[u].nbytes});
  }
  return spans;
}

std::vector<const internal_plan::ReadPiece*> Placer::PiecesOf(
    const std::vector<ChunkSpan>& spans) const {
  std::vector<const internal_plan::ReadPiece*> out;
  std::set<std::pair<int64_t, int64_t>> seen;
  for (const ChunkSpan& s : spans) {
    if (!seen.insert({s.tensor, s.chunk}).second) continue;
    const auto it = pieces_.find({s.tensor, s.chunk});
    if (it != pieces_.end()) out.insert(out.end(), it->second.begin(), it->second.end());
  }
  return out;
}

Status Placer::FromFiles(DataFiles* files, const std::vector<uint32_t>& units) {
  if (units.empty()) return OkStatus();
  const std::vector<ChunkSpan> spans = Spans(units);
  return internal_checkpoint::ExecuteSpans(m_, PiecesOf(spans), {}, spans, files, pool_, options_,
                                           stats_);
}

Status Placer::FromMemory(const Arrived& units) {
  if (units.empty()) return OkStatus();
  // The units as the files of an overlay with no node copy under them.
  OverlayFiles mem;
  mem.dir = dir_;
  mem.names = m_.files;
  mem.held.assign(m_.files.size(), 0);
  mem.extent = ut_.extent;
  mem.units.resize(m_.files.size());
  std::vector<uint32_t> ids;
  for (const auto& [u, bytes] : units) {
    const Unit& unit = ut_.units[u];
    mem.units[unit.file][unit.offset] = std::string_view(bytes, unit.nbytes);
    ids.push_back(u);
  }
  OverlayStorage storage(storage_, &mem);
  DataFiles files(&storage, dir_, &m_);
  internal_checkpoint::ReadOptions o = options_;
  o.verify_checksums = false;  // each was checked where it arrived
  o.prefetch_bytes = 0;
  const std::vector<ChunkSpan> spans = Spans(ids);
  return internal_checkpoint::ExecuteSpans(m_, PiecesOf(spans), {}, spans, &files, pool_, o,
                                           stats_);
}

}  // namespace shardpoint::internal_local
