// MergeShards: a manifest from a v3 to v6 index and some of its shards
// (src/format/manifest_index.h). The index is walked in key order and each
// shard's records taken in order as their keys come up, so a shard's keys
// need not be adjacent in key order (v6: an owner's hash-chosen keys).
#include <algorithm>
#include <map>
#include <string_view>
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
  std::vector<uint64_t> stored;  // with a filter: each tensor record's chunk count as stored
  std::vector<std::string_view> file_views;  // with a filter: the file names (m.files is empty)
  std::string name;
  size_t next_tensor = 0;
  size_t next_object = 0;
  std::vector<uint32_t> global_file;  // shard file number -> merged file number
  bool finished = false;              // every record taken, and their memory freed
  uint64_t chunk_records = 0;         // as stored
};

Result<OpenShard> OpenOne(const ManifestIndex& index, uint32_t s, std::string_view bytes,
                          const std::string& dir, const ChunkFilter* keep) {
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
  if (keep != nullptr) {
    ChunkFilter filter = *keep;
    filter.files = &out.file_views;  // views into `bytes`, which outlive the merge
    SP_ASSIGN_OR_RETURN(out.m, DecodeManifest(bytes, out.name, filter, &out.stored));
  } else {
    SP_ASSIGN_OR_RETURN(out.m, DecodeManifest(bytes, out.name));
  }
  if (out.stored.empty()) {
    for (const TensorRecord& t : out.m.tensors) out.chunk_records += t.chunks.size();
  } else {
    for (uint64_t n : out.stored) out.chunk_records += n;
  }
  if (out.m.version != 2 || out.m.block_size != index.block_size || out.m.has_common ||
      !out.m.metadata_json.empty()) {
    return DataLossError("manifest shard '" + out.name +
                         "': not a shard of this index (version, block size, common blob or "
                         "metadata differ)");
  }
  return out;
}

// The shards given, each checked and decoded when a record of it is first
// taken and freed once all of its records are: a loading rank's few hundred
// decoded shards never live at once (a fresh process pays for every page it
// touches first).
class Shards {
 public:
  Shards(const ManifestIndex& index, const std::vector<std::pair<uint32_t, std::string>>& have,
         const std::string& dir, const ChunkFilter* keep)
      : index_(index), dir_(dir), keep_(keep) {
    for (const auto& [s, bytes] : have) {
      bytes_[s] = &bytes;
      max_chunks_ += bytes.size() / 44;  // a chunk record's fixed fields
    }
  }
  bool empty() const { return bytes_.empty(); }
  // The chunks of `e`'s parts in the shards given (a bound on the index's
  // word: each chunk record takes 44 bytes or more).
  uint64_t ChunksGiven(const TensorEntry& e) const {
    uint64_t n = 0;
    for (const TensorPart& p : e.parts) {
      if (bytes_.count(p.shard)) n += std::min(p.num_chunks, max_chunks_);
    }
    return std::min(n, max_chunks_);
  }
  // Shard `s` opened (nullptr when it was not given).
  Result<OpenShard*> Get(uint32_t s) {
    auto it = open_.find(s);
    if (it != open_.end()) return &it->second;
    auto b = bytes_.find(s);
    if (b == bytes_.end()) return static_cast<OpenShard*>(nullptr);
    SP_ASSIGN_OR_RETURN(OpenShard sh, OpenOne(index_, s, *b->second, dir_, keep_));
    return &open_.emplace(s, std::move(sh)).first->second;
  }
  static void ReleaseIfDone(OpenShard& sh) {
    if (sh.finished || sh.next_tensor != sh.m.tensors.size() ||
        sh.next_object != sh.m.objects.size()) {
      return;
    }
    sh.finished = true;
    std::vector<TensorRecord>().swap(sh.m.tensors);
    std::vector<ObjectRecord>().swap(sh.m.objects);
  }
  // Every shard given: opened (checked) and holding no record left untaken
  // (of a partial index: no object); adds their chunk records to `chunk_records`.
  Status CheckAllTaken(uint64_t* chunk_records);

 private:
  const ManifestIndex& index_;
  const std::string& dir_;
  const ChunkFilter* keep_;
  std::map<uint32_t, const std::string*> bytes_;
  uint64_t max_chunks_ = 0;
  std::unordered_map<uint32_t, OpenShard> open_;
};

Status Mismatch(const OpenShard& sh, const std::string& what) {
  return DataLossError("manifest shard '" + sh.name + "': " + what);
}

// Appends part `p` of tensor `e` (the next record of shard `sh`) to `t`,
// after checking it against the index: dtype, shape, chunk count, chunks
// inside the part's span and after the chunks already taken.
// Of a partial index (a loading rank's), records of the keys it does not
// keep are passed over: the ranks that keep them check them, and verify
// checks the whole.
template <typename FileFn>
Status TakePart(const TensorEntry& e, size_t p, bool partial, OpenShard& sh, FileFn& file,
                TensorRecord* t) {
  const std::string what = "tensor '" + e.key + "'" +
                           (e.parts.size() > 1 ? " part " + std::to_string(p) : std::string());
  while (partial && sh.next_tensor < sh.m.tensors.size() &&
         sh.m.tensors[sh.next_tensor].key < e.key) {
    ++sh.next_tensor;
  }
  if (sh.next_tensor >= sh.m.tensors.size() || sh.m.tensors[sh.next_tensor].key != e.key) {
    return Mismatch(sh, "does not hold " + what + " where the index puts it");
  }
  const size_t at = sh.next_tensor++;
  TensorRecord& r = sh.m.tensors[at];
  const uint64_t stored = sh.stored.empty() ? r.chunks.size() : sh.stored[at];
  if (r.dtype != e.dtype || r.shape != e.shape || stored != e.parts[p].num_chunks) {
    return Mismatch(sh, what + " differs from the index (dtype, shape or chunk count)");
  }
  const Box span = e.span(p);
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

// Appends the objects of `run` to `out`: from its shard where that is
// open (after checking that the shard holds them where the index puts
// them), else their skeleton (key, index, grid; location 0), or nothing
// where `skeletons` is false.
template <typename FileFn>
Status TakeRun(const ObjectRun& run, Shards& shards, FileFn& file, bool skeletons,
               std::vector<ObjectRecord>* out) {
  OpenShard* open = nullptr;
  if (!shards.empty()) {
    SP_ASSIGN_OR_RETURN(open, shards.Get(run.shard));
  }
  if (open == nullptr && !skeletons) return OkStatus();
  Shape at = run.first;
  for (uint64_t i = 0; i < run.count; ++i, NextIndex(run.grid, &at)) {
    if (open == nullptr) {
      ObjectRecord& o = out->emplace_back();
      o.key = run.key, o.index = at, o.grid = run.grid;
      continue;
    }
    OpenShard& sh = *open;
    if (sh.next_object >= sh.m.objects.size() || sh.m.objects[sh.next_object].key != run.key ||
        sh.m.objects[sh.next_object].index != at || sh.m.objects[sh.next_object].grid != run.grid) {
      return Mismatch(sh, "does not hold object '" + run.key + "' index " + ShapeToString(at) +
                              " where the index puts it");
    }
    ObjectRecord& o = out->emplace_back(std::move(sh.m.objects[sh.next_object++]));
    o.file = file(sh, o.file);
  }
  if (open != nullptr) Shards::ReleaseIfDone(*open);
  return OkStatus();
}

Status Shards::CheckAllTaken(uint64_t* chunk_records) {
  for (const auto& [s, bytes] : bytes_) {
    SP_ASSIGN_OR_RETURN(OpenShard * sh, Get(s));
    *chunk_records += sh->chunk_records;
    const bool tensors_left = !index_.partial && sh->next_tensor != sh->m.tensors.size();
    if (!sh->finished && (tensors_left || sh->next_object != sh->m.objects.size())) {
      return Mismatch(*sh, "holds records the index does not put in it");
    }
  }
  return OkStatus();
}

}  // namespace

Result<Manifest> MergeShards(ManifestIndex index,
                             const std::vector<std::pair<uint32_t, std::string>>& have,
                             const std::string& dir, const std::vector<KeyBoxes>* keep,
                             uint64_t* chunk_records) {
  // `keep` sorted by key, for the decoder's filter.
  std::vector<const KeyBoxes*> sorted;
  ChunkFilter filter;
  if (keep != nullptr) {
    for (const KeyBoxes& kb : *keep) sorted.push_back(&kb);
    std::sort(sorted.begin(), sorted.end(),
              [](const KeyBoxes* a, const KeyBoxes* b) { return a->key < b->key; });
    filter.boxes = [&sorted](const std::string& key) -> const std::vector<Box>* {
      auto it =
          std::lower_bound(sorted.begin(), sorted.end(), key,
                           [](const KeyBoxes* kb, const std::string& k) { return kb->key < k; });
      return it != sorted.end() && (*it)->key == key ? &(*it)->boxes : nullptr;
    };
  }
  Shards shards(index, have, dir, keep != nullptr ? &filter : nullptr);
  Manifest m;
  m.version = index.version;  // what was read; it encodes as version 2
  m.block_size = index.block_size;
  m.has_common = index.has_common;
  m.common = std::move(index.common);
  m.metadata_json = std::move(index.metadata_json);
  std::unordered_map<std::string, uint32_t> numbers;
  auto file = [&](OpenShard& sh, uint32_t f) {
    const bool views = sh.m.files.empty();
    if (sh.global_file.empty()) {
      sh.global_file.assign(views ? sh.file_views.size() : sh.m.files.size(), UINT32_MAX);
    }
    uint32_t& g = sh.global_file[f];
    if (g == UINT32_MAX) {
      const std::string name = views ? std::string(sh.file_views[f]) : std::string();
      const std::string& n = views ? name : sh.m.files[f];
      auto it = numbers.find(n);
      if (it == numbers.end()) {
        it = numbers.emplace(n, static_cast<uint32_t>(m.files.size())).first;
        m.files.push_back(n);
      }
      g = it->second;
    }
    return g;
  };
  m.tensors.resize(index.tensors.size());
  for (size_t i = 0; i < index.tensors.size(); ++i) {
    TensorEntry& e = index.tensors[i];
    TensorRecord& t = m.tensors[i];
    t.dtype = e.dtype;
    if (!shards.empty() && keep == nullptr) t.chunks.reserve(shards.ChunksGiven(e));
    for (size_t p = 0; p < e.parts.size() && !shards.empty(); ++p) {
      SP_ASSIGN_OR_RETURN(OpenShard * sh, shards.Get(e.parts[p].shard));
      if (sh == nullptr) continue;
      SP_RETURN_IF_ERROR(TakePart(e, p, index.partial, *sh, file, &t));
      Shards::ReleaseIfDone(*sh);
    }
    t.key = std::move(e.key);
    t.shape = std::move(e.shape);             // after its parts: TakePart checks against e.shape
    std::vector<TensorPart>().swap(e.parts);  // their memory serves the records that follow
    std::vector<int64_t>().swap(e.spans);
  }
  if (keep == nullptr) m.objects.reserve(index.num_objects());
  for (const ObjectRun& run : index.objects) {
    SP_RETURN_IF_ERROR(TakeRun(run, shards, file, keep == nullptr, &m.objects));
  }
  uint64_t records = 0;
  SP_RETURN_IF_ERROR(shards.CheckAllTaken(&records));
  if (chunk_records != nullptr) *chunk_records = records;
  return m;
}

}  // namespace shardpoint::internal_format
