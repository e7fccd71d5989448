#include "src/checkpoint/data_header.h"

#include <algorithm>
#include <tuple>
#include <vector>

#include "src/format/safetensors.h"
#include "src/plan/save_plan.h"

using shardpoint::internal_format::ChunkRecord;
using shardpoint::internal_format::EncodeDataFileHeader;
using shardpoint::internal_format::Manifest;
using shardpoint::internal_format::ObjectRecord;
using shardpoint::internal_format::SafetensorsEntry;
using shardpoint::internal_format::TensorRecord;
using shardpoint::internal_plan::ChunkEntryName;
using shardpoint::internal_plan::ObjectEntryName;

namespace shardpoint::internal_checkpoint {

std::string ImpliedDataFileHeader(const Manifest& m, uint32_t file) {
  // The writers lay items out by element size (largest first), tensors
  // before objects, each in manifest order; offsets are increasing in that
  // order, and at equal offsets (empty objects) it breaks the tie.
  struct Item {
    uint64_t offset;
    bool is_object;
    size_t record, chunk;
    SafetensorsEntry entry;
  };
  std::vector<Item> items;
  for (size_t t = 0; t < m.tensors.size(); ++t) {
    const TensorRecord& rec = m.tensors[t];
    for (size_t i = 0; i < rec.chunks.size(); ++i) {
      const ChunkRecord& c = rec.chunks[i];
      if (c.file != file) continue;
      items.push_back({c.offset, false, t, i,
                       SafetensorsEntry{ChunkEntryName(rec.key, static_cast<int64_t>(i)), rec.dtype,
                                        c.box.shape, c.offset, c.offset + c.nbytes}});
    }
  }
  for (size_t o = 0; o < m.objects.size(); ++o) {
    const ObjectRecord& rec = m.objects[o];
    if (rec.file != file) continue;
    items.push_back({rec.offset, true, o, 0,
                     SafetensorsEntry{ObjectEntryName(rec),
                                      DType::kU8,
                                      {static_cast<int64_t>(rec.nbytes)},
                                      rec.offset,
                                      rec.offset + rec.nbytes}});
  }
  std::sort(items.begin(), items.end(), [](const Item& a, const Item& b) {
    return std::tie(a.offset, a.is_object, a.record, a.chunk) <
           std::tie(b.offset, b.is_object, b.record, b.chunk);
  });
  // The data region starts at the first item.
  const uint64_t data_start = items.empty() ? 0 : items.front().offset;
  std::vector<SafetensorsEntry> entries;
  entries.reserve(items.size());
  for (Item& it : items) {
    it.entry.begin -= data_start;
    it.entry.end -= data_start;
    entries.push_back(std::move(it.entry));
  }
  return EncodeDataFileHeader(entries);
}

}  // namespace shardpoint::internal_checkpoint
