#include "src/local/units.h"

#include <algorithm>
#include <tuple>

using shardpoint::internal_format::ChunkRecord;
using shardpoint::internal_format::Manifest;
using shardpoint::internal_format::NumBlocks;
using shardpoint::internal_format::ObjectRecord;
using shardpoint::internal_format::TensorRecord;
using shardpoint::internal_format::VerifyBlock;

namespace shardpoint::internal_local {

UnitTable UnitsOf(const Manifest& m) {
  UnitTable t;
  for (const TensorRecord& tr : m.tensors) {
    for (const ChunkRecord& c : tr.chunks) {
      if (c.nbytes == 0) continue;
      const uint64_t block = VerifyBlock(m, c);
      const uint64_t n = NumBlocks(c.nbytes, block);
      for (uint64_t k = 0; k < n; ++k) {
        const uint64_t at = k * block;
        const uint64_t len = std::min(block, c.nbytes - at);
        const uint64_t sum = c.block_sums.empty() ? c.checksum : c.block_sums[k];
        t.units.push_back(Unit{c.file, c.offset + at, len, sum});
      }
    }
  }
  for (const ObjectRecord& o : m.objects)
    t.units.push_back(Unit{o.file, o.offset, o.nbytes, o.checksum});
  std::sort(t.units.begin(), t.units.end(), [](const Unit& a, const Unit& b) {
    return std::tie(a.file, a.offset) < std::tie(b.file, b.offset);
  });
  t.file_begin.assign(m.files.size() + 1, 0);
  t.extent.assign(m.files.size(), 0);
  size_t i = 0;
  for (uint32_t f = 0; f < m.files.size(); ++f) {
    t.file_begin[f] = i;
    while (i < t.units.size() && t.units[i].file == f) {
      t.extent[f] = std::max(t.extent[f], t.units[i].offset + t.units[i].nbytes);
      ++i;
    }
  }
  t.file_begin[m.files.size()] = i;
  return t;
}

std::string UnitName(const Manifest& m, const Unit& u) {
  return "'" + m.files[u.file] + "' bytes [" + std::to_string(u.offset) + ", " +
         std::to_string(u.offset + u.nbytes) + ")";
}

std::vector<std::pair<size_t, size_t>> SlicesOf(const UnitTable& t, uint32_t file,
                                                uint64_t max_bytes) {
  std::vector<std::pair<size_t, size_t>> out;
  const size_t end = t.file_begin[file + 1];
  size_t i = t.file_begin[file];
  uint64_t from = 0;
  while (i < end) {
    size_t j = i + 1;
    while (j < end && t.units[j].offset + t.units[j].nbytes - from <= max_bytes) ++j;
    out.emplace_back(i, j);
    from = t.units[j - 1].offset + t.units[j - 1].nbytes;
    i = j;
  }
  return out;
}

}  // namespace shardpoint::internal_local
