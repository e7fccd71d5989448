// MergeShards: a manifest from a v3 or v4 index and some of its shards
// (src/format/manifest_index.h).
#include <unordered_map>
#include <utility>

#include "src/base/hex.h"
#include "src/format/checksum.h"
#include "src/format/manifest_index.h"

using shardpoint::internal_base::Hex16;

namespace shardpoint::internal_format {
namespace {

// A decoded shard and how far its records have been taken.
struct OpenShard {
  Manifest m;
  std::string name;
  size_t next_tensor = 0;
  size_t next_object = 0;
  std::vector<uint32_t> global_file;  // shard file number -> merged file number
};

Result<OpenShard> OpenOne(const ManifestIndex& index, uint32_t s, std::string_view bytes,
                          const std::string& dir) {
  OpenShard out;
  out.name = ShardName(index, s, dir);
  if (s >= index.shards.size()) {
    return DataLossError("manifest shard '" + out.name + "': the index has " +
                         std::to_string(index.shards.size()) + " shards");
  }
  const ShardRef& ref = index.shards[s];
  if (bytes.size() != ref.nbytes) {
    return DataLossError("manifest shard '" + out.name + "': " + std::to_string(bytes.size()) +
                         " bytes but the index says " + std::to_string(ref.nbytes));
  }
  const uint64_t sum = Checksum64(bytes.data(), bytes.size());
  if (sum != ref.checksum) {
    return DataLossError("manifest shard '" + out.name + "': checksum mismatch over bytes [0, " +
                         std::to_string(bytes.size()) + "): the index says " + Hex16(ref.checksum) +
                         ", computed " + Hex16(sum));
  }
  SP_ASSIGN_OR_RETURN(out.m, DecodeManifest(bytes, out.name));
  if (out.m.version != 2 || out.m.block_size != index.block_size || out.m.has_common ||
      !out.m.metadata_json.empty()) {
    return DataLossError("manifest shard '" + out.name +
                         "': not a shard of this index (version, block size, common blob or "
                         "metadata differ)");
  }
  return out;
}

Status Mismatch(const OpenShard& sh, const std::string& what) {
  return DataLossError("manifest shard '" + sh.name + "': " + what);
}

// Appends part `p` of tensor `e` (the next record of shard `sh`) to `t`,
// after checking it against the index: dtype, shape, chunk count, chunks
// inside the part's span and after the chunks already taken.
template <typename FileFn>
Status TakePart(const TensorEntry& e, size_t p, OpenShard& sh, FileFn& file, TensorRecord* t) {
  const std::string what = "tensor '" + e.key + "'" +
                           (e.parts.size() > 1 ? " part " + std::to_string(p) : std::string());
  if (sh.next_tensor >= sh.m.tensors.size() || sh.m.tensors[sh.next_tensor].key != e.key) {
    return Mismatch(sh, "does not hold " + what + " where the index puts it");
  }
  TensorRecord& r = sh.m.tensors[sh.next_tensor++];
  if (r.dtype != e.dtype || r.shape != e.shape || r.chunks.size() != e.parts[p].num_chunks) {
    return Mismatch(sh, what + " differs from the index (dtype, shape or chunk count)");
  }
  const Box& span = e.parts[p].span;
  for (ChunkRecord& c : r.chunks) {
    for (size_t d = 0; d < span.offset.size(); ++d) {
      if (c.box.offset[d] < span.offset[d] ||
          c.box.offset[d] + c.box.shape[d] > span.offset[d] + span.shape[d]) {
        return Mismatch(sh, what + " has chunk " + c.box.ToString() +
                                " outside the span the index gives, " + span.ToString());
      }
    }
    if (!t->chunks.empty() && !(t->chunks.back().box < c.box)) {
      return Mismatch(
          sh, what + " chunk " + c.box.ToString() + " is not after the previous part's chunks");
    }
    c.file = file(sh, c.file);
    t->chunks.push_back(std::move(c));
  }
  return OkStatus();
}

}  // namespace

Result<Manifest> MergeShards(ManifestIndex index,
                             const std::vector<std::pair<uint32_t, std::string>>& have,
                             const std::string& dir) {
  std::unordered_map<uint32_t, OpenShard> open;
  for (const auto& [s, bytes] : have) {
    SP_ASSIGN_OR_RETURN(OpenShard sh, OpenOne(index, s, bytes, dir));
    open.insert_or_assign(s, std::move(sh));
  }
  Manifest m;
  m.version = index.version;  // what was read; it encodes as version 2
  m.block_size = index.block_size;
  m.has_common = index.has_common;
  m.common = std::move(index.common);
  m.metadata_json = std::move(index.metadata_json);
  std::unordered_map<std::string, uint32_t> numbers;
  auto file = [&](OpenShard& sh, uint32_t f) {
    if (sh.global_file.empty()) sh.global_file.assign(sh.m.files.size(), UINT32_MAX);
    uint32_t& g = sh.global_file[f];
    if (g == UINT32_MAX) {
      auto [it, added] = numbers.emplace(sh.m.files[f], static_cast<uint32_t>(m.files.size()));
      if (added) m.files.push_back(sh.m.files[f]);
      g = it->second;
    }
    return g;
  };
  m.tensors.resize(index.tensors.size());
  for (size_t i = 0; i < index.tensors.size(); ++i) {
    TensorEntry& e = index.tensors[i];
    TensorRecord& t = m.tensors[i];
    t.dtype = e.dtype, t.shape = e.shape;
    for (size_t p = 0; p < e.parts.size(); ++p) {
      auto it = open.find(e.parts[p].shard);
      if (it == open.end()) continue;
      SP_RETURN_IF_ERROR(TakePart(e, p, it->second, file, &t));
    }
    t.key = std::move(e.key);
  }
  m.objects.resize(index.objects.size());
  for (size_t i = 0; i < index.objects.size(); ++i) {
    ObjectEntry& e = index.objects[i];
    ObjectRecord& o = m.objects[i];
    auto it = open.empty() ? open.end() : open.find(e.shard);
    if (it == open.end()) {
      o.key = std::move(e.key), o.index = std::move(e.index), o.grid = std::move(e.grid);
      continue;
    }
    OpenShard& sh = it->second;
    if (sh.next_object >= sh.m.objects.size() || sh.m.objects[sh.next_object].key != e.key ||
        sh.m.objects[sh.next_object].index != e.index ||
        sh.m.objects[sh.next_object].grid != e.grid) {
      return Mismatch(sh, "does not hold object '" + e.key + "' index " + ShapeToString(e.index) +
                              " where the index puts it");
    }
    o = std::move(sh.m.objects[sh.next_object++]);
    o.file = file(sh, o.file);
  }
  for (const auto& [s, sh] : open) {
    if (sh.next_tensor != sh.m.tensors.size() || sh.next_object != sh.m.objects.size()) {
      return Mismatch(sh, "holds records the index does not put in it");
    }
  }
  return m;
}

}  // namespace shardpoint::internal_format
