// CombineIndexes: one v6 index from the indexes of disjoint key sets, each
// with shard files of its own (src/format/manifest_index.h).
#include <algorithm>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "src/format/manifest_index.h"

namespace shardpoint::internal_format {
namespace {

Status BadPart(size_t p, const std::string& what) {
  return InternalError("CombineIndexes: part " + std::to_string(p) + " " + what);
}

// Part `p` is a whole v6 index whose shards name its files, each file used.
Status CheckPart(const ManifestIndex& part, size_t p, uint64_t block_size) {
  if (part.partial || part.version != kIndexVersion) {
    return BadPart(p, "is partial or not version " + std::to_string(kIndexVersion) + " (version " +
                          std::to_string(part.version) + ")");
  }
  if (part.block_size != block_size) {
    return BadPart(p, "has block size " + std::to_string(part.block_size) + ", part 0 " +
                          std::to_string(block_size));
  }
  std::vector<bool> used(part.shard_files.size(), false);
  for (size_t s = 0; s < part.shards.size(); ++s) {
    if (part.shards[s].file >= used.size()) {
      return BadPart(p, "shard " + std::to_string(s) + " is in shard file " +
                            std::to_string(part.shards[s].file) + " of " +
                            std::to_string(used.size()));
    }
    used[part.shards[s].file] = true;
  }
  for (size_t f = 0; f < used.size(); ++f) {
    if (!used[f]) {
      return BadPart(p, "shard file '" + ShardFileName(part.shard_files[f]) + "' holds no shard");
    }
  }
  return OkStatus();
}

// The files in writer order, as the index lists them, and each shard's file
// renumbered to its place; InternalError naming a file of two parts.
Status SortFiles(std::vector<std::pair<uint32_t, size_t>> files, ManifestIndex* out) {
  std::vector<uint32_t> place(files.size());
  std::vector<size_t> order(files.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return files[a].first < files[b].first; });
  for (size_t k = 0; k < order.size(); ++k) {
    const auto& [writer, p] = files[order[k]];
    if (k > 0 && files[order[k - 1]].first == writer) {
      return InternalError("CombineIndexes: shard file '" + ShardFileName(writer) +
                           "' is in parts " + std::to_string(files[order[k - 1]].second) + " and " +
                           std::to_string(p));
    }
    place[order[k]] = static_cast<uint32_t>(k);
    out->shard_files.push_back(writer);
  }
  for (ShardRef& s : out->shards) s.file = place[s.file];
  return OkStatus();
}

}  // namespace

Result<ManifestIndex> CombineIndexes(std::vector<ManifestIndex> parts) {
  ManifestIndex out;
  out.version = kIndexVersion;
  if (!parts.empty()) out.block_size = parts[0].block_size;
  // Every entry with the part it came from, its shards renumbered.
  std::vector<std::pair<TensorEntry, size_t>> tensors;
  std::vector<std::pair<ObjectRun, size_t>> objects;
  std::vector<std::pair<uint32_t, size_t>> file_part;  // (writer, part) per file
  for (size_t p = 0; p < parts.size(); ++p) {
    ManifestIndex& part = parts[p];
    SP_RETURN_IF_ERROR(CheckPart(part, p, out.block_size));
    const auto first_shard = static_cast<uint32_t>(out.shards.size());
    const auto first_file = static_cast<uint32_t>(file_part.size());
    if (out.shards.size() + part.shards.size() > UINT32_MAX) {
      return BadPart(p, "takes the shards past 2^32");
    }
    for (uint32_t f : part.shard_files) file_part.emplace_back(f, p);
    for (ShardRef s : part.shards) {
      s.file += first_file;  // its offset is within its file: unchanged
      out.shards.push_back(s);
    }
    for (TensorEntry& t : part.tensors) {
      for (TensorPart& tp : t.parts) tp.shard += first_shard;
      tensors.emplace_back(std::move(t), p);
    }
    for (ObjectRun& r : part.objects) {
      r.shard += first_shard;
      objects.emplace_back(std::move(r), p);
    }
  }
  SP_RETURN_IF_ERROR(SortFiles(file_part, &out));
  std::stable_sort(tensors.begin(), tensors.end(),
                   [](const auto& a, const auto& b) { return a.first.key < b.first.key; });
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (i > 0 && tensors[i - 1].first.key == tensors[i].first.key) {
      return InternalError("CombineIndexes: tensor '" + tensors[i].first.key + "' is in parts " +
                           std::to_string(tensors[i - 1].second) + " and " +
                           std::to_string(tensors[i].second));
    }
  }
  // Runs by first index; then each must start after the one before ends.
  std::stable_sort(objects.begin(), objects.end(), [](const auto& a, const auto& b) {
    return std::tie(a.first.key, a.first.first) < std::tie(b.first.key, b.first.first);
  });
  for (size_t i = 1; i < objects.size(); ++i) {
    const ObjectRun &a = objects[i - 1].first, &b = objects[i].first;
    if (!(std::tie(a.key, a.last) < std::tie(b.key, b.first))) {
      return InternalError("CombineIndexes: object '" + b.key + "' index " +
                           ShapeToString(b.first) + " is in parts " +
                           std::to_string(objects[i - 1].second) + " and " +
                           std::to_string(objects[i].second));
    }
  }
  out.tensors.reserve(tensors.size());
  for (auto& [t, p] : tensors) out.tensors.push_back(std::move(t));
  out.objects.reserve(objects.size());
  for (auto& [r, p] : objects) out.objects.push_back(std::move(r));
  return out;
}

}  // namespace shardpoint::internal_format
