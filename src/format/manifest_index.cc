// Formats v3 to v6: the index and the manifest shards (docs/format.md section 3.2).
#include "src/format/manifest_index.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "src/base/bytes.h"
#include "src/base/checked.h"
#include "src/base/hex.h"
#include "src/format/checksum.h"
#include "src/format/field_reader.h"
#include "src/geometry/flat_range.h"

using shardpoint::internal_base::ByteWriter;
using shardpoint::internal_base::Hex16;
using shardpoint::internal_geometry::RowMajorIndex;
using shardpoint::internal_geometry::UnravelIndex;

namespace shardpoint::internal_format {
namespace {

constexpr char kMagic[8] = {'S', 'H', 'R', 'D', 'P', 'N', 'T', '\0'};
// magic, version, flags, block size, 3 counts, has_common, 2 lengths, checksum.
constexpr size_t kMinIndex = 8 + 4 + 4 + 8 + 8 + 8 + 8 + 1 + 8 + 8 + 8;
constexpr size_t kMinShard = 16;
constexpr size_t kMinShardV6 = 20;  // u32 file, u64 size, u64 checksum
constexpr size_t kMinShardFile = 4;
constexpr size_t kMinTensor = 4 + 1 + 1 + 4 + 8;
constexpr size_t kMinObject = 4 + 1 + 1 + 4;
// v5: key length, grid rank, count, shard.
constexpr size_t kMinObjectRun = 4 + 1 + 8 + 4;

uint64_t TensorBytes(const TensorRecord& t) {
  uint64_t n = 14 + t.key.size() + 8 * t.shape.size();
  for (const ChunkRecord& c : t.chunks) n += 44 + 16 * t.shape.size() + 8 * c.block_sums.size();
  return n;
}
uint64_t ObjectBytes(const ObjectRecord& o) {
  return 42 + o.key.size() + 8 * (o.index.size() + o.grid.size());
}

// Numbers files by first use: `global` maps a name to its number in `files`.
class FileNumbering {
 public:
  uint32_t Add(const std::string& name) {
    auto [it, added] = number_.emplace(name, static_cast<uint32_t>(files_.size()));
    if (added) files_.push_back(name);
    return it->second;
  }
  std::vector<std::string>& files() { return files_; }

 private:
  std::unordered_map<std::string, uint32_t> number_;
  std::vector<std::string> files_;
};

// One shard being built: its records with files renumbered locally.
struct ShardBuilder {
  Manifest m;
  FileNumbering files;
  uint64_t bytes = 0;
};

}  // namespace

uint32_t EncodedVersion(std::string_view bytes) {
  if (bytes.size() < 12 || std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) return 0;
  uint32_t v;
  std::memcpy(&v, bytes.data() + 8, 4);
  return v;
}

std::string ShardFileName(uint32_t writer) {
  return writer == kMainShards ? std::string(kShardsFile)
                               : "data/manifest." + std::to_string(writer) + ".shards";
}

std::string ShardName(const ManifestIndex& index, uint32_t s, const std::string& dir) {
  const bool known = s < index.shards.size() && index.shards[s].file < index.shard_files.size();
  // A shard the index does not have: its only file, if it has one.
  const std::string file = ShardFileName(known ? index.shard_files[index.shards[s].file]
                                         : index.shard_files.size() == 1 ? index.shard_files[0]
                                                                         : kMainShards);
  std::string name = (dir.empty() ? "" : dir + "/") + file + " shard " + std::to_string(s);
  if (s >= index.shards.size()) return name;
  const ShardRef& r = index.shards[s];
  return name + " (bytes [" + std::to_string(r.offset) + ", " +
         std::to_string(r.offset + r.nbytes) + "))";
}

Manifest CanonicalFileOrder(const Manifest& m) {
  Manifest out = m;
  FileNumbering n;
  for (TensorRecord& t : out.tensors) {
    for (ChunkRecord& c : t.chunks) c.file = n.Add(m.files[c.file]);
  }
  for (ObjectRecord& o : out.objects) o.file = n.Add(m.files[o.file]);
  out.files = std::move(n.files());
  return out;
}

namespace {

uint64_t ChunkBytes(const TensorRecord& t, const ChunkRecord& c) {
  return 44 + 16 * t.shape.size() + 8 * c.block_sums.size();
}

// The bounding box of chunks [i, j) of `t`.
Box Span(const TensorRecord& t, size_t i, size_t j) {
  Box span = t.chunks[i].box;
  for (size_t k = i + 1; k < j; ++k) {
    const Box& b = t.chunks[k].box;
    for (size_t d = 0; d < span.offset.size(); ++d) {
      const int64_t lo = std::min(span.offset[d], b.offset[d]);
      const int64_t hi = std::max(span.offset[d] + span.shape[d], b.offset[d] + b.shape[d]);
      span.offset[d] = lo, span.shape[d] = hi - lo;
    }
  }
  return span;
}

// Cuts tensor `t` (larger than a shard) into parts of about `part_bytes`,
// each in a fresh shard (marked full, so that no other record joins it).
void AddParts(const Manifest& m, const TensorRecord& t, uint64_t shard_bytes, uint64_t part_bytes,
              std::vector<ShardBuilder>& shards, TensorEntry& e) {
  for (size_t i = 0; i < t.chunks.size();) {
    ShardBuilder& b = shards.emplace_back();
    b.m.block_size = m.block_size;
    TensorRecord r{t.key, t.dtype, t.shape, {}};
    uint64_t bytes = 14 + t.key.size() + 8 * t.shape.size();
    size_t j = i;
    do {
      bytes += ChunkBytes(t, t.chunks[j]);
      r.chunks.push_back(t.chunks[j]);
      r.chunks.back().file = b.files.Add(m.files[t.chunks[j].file]);
      ++j;
    } while (j < t.chunks.size() && bytes < part_bytes);
    e.AddPart(static_cast<uint32_t>(shards.size() - 1), j - i, Span(t, i, j));
    b.m.tensors.push_back(std::move(r));
    b.bytes = std::max(shard_bytes, bytes);
    i = j;
  }
  if (e.parts.size() == 1) e.spans.clear();  // the whole tensor
}

}  // namespace

bool NextIndex(const Shape& grid, Shape* index) {
  for (size_t d = index->size(); d-- > 0;) {
    if (++(*index)[d] < grid[d]) return true;
    (*index)[d] = 0;
  }
  return false;
}

namespace {

// Whether `next` is the index after `prev` in row-major order inside `grid`
// (all three of the same rank), without building it.
bool Follows(const Shape& grid, const Shape& prev, const Shape& next) {
  size_t d = prev.size();
  while (d > 0 && prev[d - 1] + 1 >= grid[d - 1]) --d;  // trailing dimensions at their last
  if (d == 0) return false;                             // `prev` is the grid's last index
  --d;
  for (size_t i = 0; i < d; ++i) {
    if (next[i] != prev[i]) return false;
  }
  if (next[d] != prev[d] + 1) return false;
  for (size_t i = d + 1; i < next.size(); ++i) {
    if (next[i] != 0) return false;
  }
  return true;
}

}  // namespace

uint64_t ManifestIndex::num_objects() const {
  uint64_t n = 0;
  for (const ObjectRun& r : objects) n += r.count;
  return n;
}

void ManifestIndex::AddObject(const std::string& key, const Shape& index, const Shape& grid,
                              uint32_t shard) {
  if (!objects.empty()) {
    ObjectRun& r = objects.back();
    if (r.shard == shard && r.key == key && r.grid == grid && index.size() == grid.size() &&
        Follows(grid, r.last, index)) {
      r.last = index;
      ++r.count;
      return;
    }
  }
  objects.push_back({key, grid, index, index, 1, shard});
}

Box TensorEntry::span(size_t p) const {
  if (spans.empty()) return Box::Whole(shape);
  const size_t r = shape.size();
  const auto at = spans.begin() + static_cast<ptrdiff_t>(2 * r * p);
  const auto mid = at + static_cast<ptrdiff_t>(r);
  return Box(Shape(at, mid), Shape(mid, mid + static_cast<ptrdiff_t>(r)));
}

void TensorEntry::AddPart(uint32_t shard, uint64_t n, const Box& box) {
  parts.push_back({shard, n});
  spans.insert(spans.end(), box.offset.begin(), box.offset.end());
  spans.insert(spans.end(), box.shape.begin(), box.shape.end());
}

uint64_t TensorEntry::num_chunks() const {
  uint64_t n = 0;
  for (const TensorPart& p : parts) n += p.num_chunks;
  return n;
}

SplitResult SplitManifest(const Manifest& m, uint64_t shard_bytes, uint64_t part_bytes,
                          uint32_t writer) {
  SplitResult out;
  ManifestIndex& idx = out.index;
  idx.block_size = m.block_size;
  idx.has_common = m.has_common;
  idx.common = m.common;
  idx.metadata_json = m.metadata_json;
  std::vector<ShardBuilder> shards;
  // Starts a new shard when the current one is full (or `fresh`).
  auto current = [&](bool fresh) -> ShardBuilder& {
    if (shards.empty() || fresh || shards.back().bytes >= shard_bytes) {
      shards.emplace_back();
      shards.back().m.block_size = m.block_size;
    }
    return shards.back();
  };
  for (const TensorRecord& t : m.tensors) {
    TensorEntry& e = idx.tensors.emplace_back(TensorEntry{t.key, t.dtype, t.shape, {}, {}});
    if (TensorBytes(t) > shard_bytes && t.chunks.size() > 1) {
      AddParts(m, t, shard_bytes, part_bytes, shards, e);
      continue;
    }
    ShardBuilder& b = current(false);
    TensorRecord r = t;
    for (ChunkRecord& c : r.chunks) c.file = b.files.Add(m.files[c.file]);
    b.bytes += TensorBytes(t);
    e.parts.push_back({static_cast<uint32_t>(shards.size() - 1), t.chunks.size()});
    b.m.tensors.push_back(std::move(r));
  }
  bool first_object = true;
  for (const ObjectRecord& o : m.objects) {
    ShardBuilder& b = current(first_object && !shards.empty() && !shards.back().m.tensors.empty());
    first_object = false;
    ObjectRecord r = o;
    r.file = b.files.Add(m.files[o.file]);
    b.bytes += ObjectBytes(o);
    idx.AddObject(o.key, o.index, o.grid, static_cast<uint32_t>(shards.size() - 1));
    b.m.objects.push_back(std::move(r));
  }
  for (ShardBuilder& b : shards) {
    b.m.files = std::move(b.files.files());
    std::string bytes = EncodeManifest(b.m);
    const uint64_t at =
        idx.shards.empty() ? 0 : idx.shards.back().offset + idx.shards.back().nbytes;
    idx.shards.push_back({bytes.size(), Checksum64(bytes.data(), bytes.size()), 0, at});
    out.shards.push_back(std::move(bytes));
  }
  if (!idx.shards.empty()) idx.shard_files = {writer};
  return out;
}

std::string EncodeIndex(const ManifestIndex& index) {
  if (index.partial) {
    std::fprintf(stderr, "shardpoint: EncodeIndex of a partial index\n");
    std::abort();
  }
  const bool files = index.version >= kIndexVersion;
  if (!files) {
    // Before v6 every shard is in kShardsFile: there is nowhere to say otherwise.
    bool one_file = index.shard_files.empty() ||
                    (index.shard_files.size() == 1 && index.shard_files[0] == kMainShards);
    for (const ShardRef& s : index.shards) one_file = one_file && s.file == 0;
    if (!one_file) {
      std::fprintf(stderr, "shardpoint: EncodeIndex version %u of shards in other files than %s\n",
                   index.version, kShardsFile);
      std::abort();
    }
  }
  ByteWriter w;
  w.Raw(kMagic, sizeof(kMagic));
  w.U32(index.version);
  w.U32(0);
  w.U64(index.block_size);
  if (files) {
    w.U64(index.shard_files.size());
    for (uint32_t f : index.shard_files) w.U32(f);
  }
  w.U64(index.shards.size());
  for (const ShardRef& s : index.shards) {
    if (files) w.U32(s.file);
    w.U64(s.nbytes);
    w.U64(s.checksum);
  }
  w.U64(index.tensors.size());
  for (const TensorEntry& t : index.tensors) {
    w.Str(t.key);
    w.U8(static_cast<uint8_t>(t.dtype));
    w.U8(static_cast<uint8_t>(t.shape.size()));
    w.Dims(t.shape);
    if (index.version == kIndexVersionV3) {
      w.U32(t.parts.at(0).shard);
      w.U64(t.parts.at(0).num_chunks);
      continue;
    }
    w.U32(static_cast<uint32_t>(t.parts.size()));
    const size_t r = t.shape.size();
    for (size_t i = 0; i < t.parts.size(); ++i) {
      w.U32(t.parts[i].shard);
      w.U64(t.parts[i].num_chunks);
      if (t.parts.size() == 1) continue;
      for (size_t d = 0; d < 2 * r; ++d) w.I64(t.spans.at(2 * r * i + d));
    }
  }
  if (index.version >= kIndexVersionV5) {
    w.U64(index.objects.size());
    for (const ObjectRun& o : index.objects) {
      w.Str(o.key);
      w.U8(static_cast<uint8_t>(o.grid.size()));
      w.Dims(o.grid);
      w.Dims(o.first);
      w.U64(o.count);
      w.U32(o.shard);
    }
  } else {
    w.U64(index.num_objects());
    for (const ObjectRun& o : index.objects) {
      Shape at = o.first;
      for (uint64_t i = 0; i < o.count; ++i, NextIndex(o.grid, &at)) {
        w.Str(o.key);
        w.U8(static_cast<uint8_t>(at.size()));
        w.Dims(at);
        w.U8(static_cast<uint8_t>(o.grid.size()));
        w.Dims(o.grid);
        w.U32(o.shard);
      }
    }
  }
  w.U8(index.has_common ? 1 : 0);
  w.Blob(index.has_common ? std::string_view(index.common) : std::string_view());
  w.Blob(index.metadata_json);
  w.U64(Checksum64(w.str().data(), w.str().size()));
  return std::move(w.str());
}

namespace {

class IndexDecoder : public FieldReader {
 public:
  IndexDecoder(std::string_view body, const std::string& name, const IndexKeep* keep)
      : FieldReader(body, "manifest index", name), keep_(keep) {}

  Status Run(ManifestIndex* idx);

 private:
  template <typename W>
  Status Shard(const W& what, uint32_t* s) {
    if (!r_.Int(s).ok()) return Truncated(FieldName(what) + " shard");
    if (*s >= num_shards_) {
      return Error(FieldName(what) + " is in shard " + std::to_string(*s) + " but there are " +
                   std::to_string(num_shards_) + " shards");
    }
    return OkStatus();
  }
  // An entry; its key as a view into the input (`t->key` is not set).
  Status Tensor(std::string_view* key, TensorEntry* t);
  Status Parts(std::string_view key, TensorEntry* t);
  Status Tensors(ManifestIndex* idx);
  Status Objects(ManifestIndex* idx);
  Status ObjectRuns(ManifestIndex* idx);
  Status OneRun(ObjectRun* r);
  Status ShardFiles(ManifestIndex* idx);
  Status ShardTable(ManifestIndex* idx);

  const IndexKeep* keep_;
  uint64_t num_shards_ = 0;
  uint32_t version_ = kIndexVersion;
};

Status IndexDecoder::Tensor(std::string_view* key, TensorEntry* t) {
  t->parts.clear();
  t->spans.clear();
  SP_RETURN_IF_ERROR(TensorHead(key, &t->dtype, &t->shape));
  auto what = [&] { return "tensor '" + std::string(*key) + "'"; };
  if (version_ == kIndexVersionV3) {
    TensorPart& p = t->parts.emplace_back();
    SP_RETURN_IF_ERROR(Shard(what, &p.shard));
    if (!r_.Int(&p.num_chunks).ok()) return Truncated(what() + " chunk count");
    return OkStatus();
  }
  return Parts(*key, t);
}

// v4: u32 P >= 1, then per part u32 shard, u64 chunk count and, when P > 1,
// its span (R offsets, R extents) inside the tensor.
Status IndexDecoder::Parts(std::string_view key, TensorEntry* t) {
  auto what = [&] { return "tensor '" + std::string(key) + "'"; };
  uint32_t n;
  if (!r_.Int(&n).ok()) return Truncated(what() + " part count");
  const size_t rank = t->shape.size();
  const size_t min_part = 12 + (n > 1 ? 16 * rank : 0);
  if (n == 0 || n > r_.left() / min_part) {
    return Error(what() + " part count " + std::to_string(n) + " is 0 or does not fit the " +
                 "remaining " + std::to_string(r_.left()) + " bytes");
  }
  t->parts.resize(n);
  if (n > 1) t->spans.resize(2 * rank * n);  // one allocation for every span
  uint64_t total = 0;
  for (uint32_t i = 0; i < n; ++i) {
    TensorPart& p = t->parts[i];
    auto part = [&] { return n > 1 ? what() + " part " + std::to_string(i) : what(); };
    SP_RETURN_IF_ERROR(Shard(part, &p.shard));
    if (!r_.Int(&p.num_chunks).ok()) return Truncated(part() + " chunk count");
    std::optional<uint64_t> sum = internal_base::CheckedAdd(total, p.num_chunks);
    if (!sum) return Error(what() + " chunk counts overflow");
    total = *sum;
    if (n == 1) continue;  // the whole tensor
    int64_t* span = t->spans.data() + 2 * rank * i;
    if (!r_.Raw(span, 16 * rank).ok()) return Truncated(part() + " span");
    for (size_t d = 0; d < rank; ++d) {
      const int64_t off = span[d], ext = span[rank + d];
      if (off < 0 || ext < 0 || off > t->shape[d] || ext > t->shape[d] - off) {
        return Error(part() + " span " + t->span(i).ToString() + " lies outside shape " +
                     ShapeToString(t->shape));
      }
    }
  }
  return OkStatus();
}

// Every object entry, read into the same few buffers and kept as runs
// (ManifestIndex::AddObject): no heap allocation per object.
Status IndexDecoder::Objects(ManifestIndex* idx) {
  uint64_t n;
  SP_RETURN_IF_ERROR(Count(kMinObject, "object", &n));
  if (n > kMaxIndexObjects) {
    return Error(std::to_string(n) + " objects, more than " + std::to_string(kMaxIndexObjects));
  }
  std::string key, prev_key;
  Shape index, grid, prev_index;
  for (uint64_t i = 0; i < n; ++i) {
    uint32_t shard;
    SP_RETURN_IF_ERROR(ObjectHead(&key, &index, &grid));
    SP_RETURN_IF_ERROR(Shard([&] { return "object '" + key + "'"; }, &shard));
    if (i > 0 && !(std::tie(prev_key, prev_index) < std::tie(key, index))) {
      return Error("object '" + key + "' index " + ShapeToString(index) +
                   " is not after the previous object (sorted by (key, index), unique)");
    }
    idx->AddObject(key, index, grid, shard);
    std::swap(key, prev_key);
    std::swap(index, prev_index);
  }
  return OkStatus();
}

// v5: str key, u8 R, R x i64 grid, R x i64 first index, u64 count >= 1,
// u32 shard: `count` objects from `first` in row-major order, all inside
// the grid.
Status IndexDecoder::OneRun(ObjectRun* r) {
  if (!r_.Str(&r->key).ok()) return Truncated("an object run key");
  auto what = [&] { return "object run '" + r->key + "'"; };
  SP_RETURN_IF_ERROR(RankAndDims([&] { return what() + " grid"; }, "", &r->grid));
  if (!r_.Dims(r->grid.size(), &r->first).ok()) return Truncated(what() + " first index");
  if (!r_.Int(&r->count).ok()) return Truncated(what() + " count");
  SP_RETURN_IF_ERROR(Shard(what, &r->shard));
  Result<int64_t> elements = CheckedNumElements(r->grid);
  if (!elements.ok()) {
    return Error(what() + " has invalid grid " + ShapeToString(r->grid) +
                 " (negative or overflowing)");
  }
  if (!IndexInGrid(r->grid, r->first)) {
    return Error(what() + " first index " + ShapeToString(r->first) + " lies outside its grid " +
                 ShapeToString(r->grid));
  }
  const int64_t first = RowMajorIndex(r->grid, r->first);
  if (r->count == 0 || r->count > static_cast<uint64_t>(*elements - first)) {
    return Error(what() + " count " + std::to_string(r->count) + " from index " +
                 ShapeToString(r->first) + " is 0 or runs past the end of its grid " +
                 ShapeToString(r->grid));
  }
  r->last = UnravelIndex(r->grid, first + static_cast<int64_t>(r->count - 1));
  return OkStatus();
}

// v5's runs, sorted (each run's first object after the previous run's last
// by (key, index)); the objects of a shard must fit its size as records.
Status IndexDecoder::ObjectRuns(ManifestIndex* idx) {
  uint64_t n, total = 0;
  SP_RETURN_IF_ERROR(Count(kMinObjectRun, "object run", &n));
  idx->objects.resize(n);
  std::vector<uint64_t> shard_bytes(idx->shards.size());
  for (uint64_t i = 0; i < n; ++i) {
    ObjectRun& r = idx->objects[i];
    SP_RETURN_IF_ERROR(OneRun(&r));
    if (i > 0) {
      const ObjectRun& p = idx->objects[i - 1];
      if (!(std::tie(p.key, p.last) < std::tie(r.key, r.first))) {
        return Error("object run '" + r.key + "' from index " + ShapeToString(r.first) +
                     " does not start after the previous run (sorted by (key, index), unique)");
      }
    }
    total += r.count;  // each count <= INT64_MAX, the sum checked before the next
    if (total > kMaxIndexObjects) {
      return Error("more than " + std::to_string(kMaxIndexObjects) + " objects (at object run '" +
                   r.key + "')");
    }
    const uint64_t record = kMinObjectRecordBytes + r.key.size() + 16 * r.grid.size();
    uint64_t& used = shard_bytes[r.shard];
    used += r.count * record;  // < 2^24 objects of < 2^33 bytes: no overflow
    if (used > idx->shards[r.shard].nbytes) {
      return Error("object run '" + r.key + "' puts more objects in shard " +
                   std::to_string(r.shard) + " than its " +
                   std::to_string(idx->shards[r.shard].nbytes) + " bytes can hold");
    }
  }
  return OkStatus();
}

// Every tensor entry, checked; kept (all of them, or with keep_ those of
// its keys) as a copy of the one buffer each is decoded into.
Status IndexDecoder::Tensors(ManifestIndex* idx) {
  uint64_t n;
  SP_RETURN_IF_ERROR(Count(kMinTensor, "tensor", &n));
  idx->tensor_count = n;
  idx->partial = keep_ != nullptr;
  if (keep_ == nullptr) idx->tensors.reserve(n);
  const std::vector<std::string>* keys = keep_ != nullptr ? keep_->keys : nullptr;
  size_t next_key = 0;  // the first of `keys` not before the entries decoded
  TensorEntry t;
  std::string_view key, prev;  // views into the input: no copy of every key
  for (uint64_t i = 0; i < n; ++i) {
    SP_RETURN_IF_ERROR(Tensor(&key, &t));
    if (i > 0 && !(prev < key)) {
      return Error("tensor '" + std::string(key) + "' is not after '" + std::string(prev) +
                   "' (keys must be sorted and unique)");
    }
    prev = key;
    if (keep_ == nullptr) {
      t.key.assign(key);
      idx->tensors.push_back(std::move(t));
      t = TensorEntry();
      continue;
    }
    if (keep_->owners > 0 && i % keep_->owners == keep_->owner) {
      idx->owned_keys.emplace_back(i, std::string(key));
    }
    while (keys != nullptr && next_key < keys->size() && (*keys)[next_key] < key) ++next_key;
    if (keys != nullptr && next_key < keys->size() && (*keys)[next_key] == key) {
      t.key.assign(key);
      idx->tensors.push_back(t);
      idx->tensor_numbers.push_back(i);
    }
  }
  return OkStatus();
}

// v6: u64 SF, then SF x u32 writer ranks (kMainShards: data/manifest.shards),
// strictly increasing: unique without a lookup table, and names that cannot
// lie outside the checkpoint's data/.
Status IndexDecoder::ShardFiles(ManifestIndex* idx) {
  uint64_t n;
  SP_RETURN_IF_ERROR(Count(kMinShardFile, "shard file", &n));
  idx->shard_files.resize(n);
  for (uint64_t i = 0; i < n; ++i) {
    uint32_t& f = idx->shard_files[i];
    if (!r_.Int(&f).ok()) return Truncated("shard file " + std::to_string(i));
    if (i > 0 && f <= idx->shard_files[i - 1]) {
      return Error("shard file " + std::to_string(i) + " '" + ShardFileName(f) +
                   "' does not follow shard file " + std::to_string(i - 1) + " '" +
                   ShardFileName(idx->shard_files[i - 1]) + "' (writers in increasing order)");
    }
  }
  return OkStatus();
}

// u64 S, then per shard (v6: u32 file,) u64 size, u64 checksum; a shard's
// offset is the sum of the sizes of the shards before it in its file.
Status IndexDecoder::ShardTable(ManifestIndex* idx) {
  const bool v6 = version_ >= kIndexVersion;
  SP_RETURN_IF_ERROR(Count(v6 ? kMinShardV6 : kMinShard, "shard", &num_shards_));
  if (num_shards_ > UINT32_MAX) return Error("too many shards");
  if (!v6 && num_shards_ > 0) idx->shard_files = {kMainShards};
  const uint64_t num_files = idx->shard_files.size();
  if (num_files > num_shards_) {
    return Error(std::to_string(num_files) + " shard files but " + std::to_string(num_shards_) +
                 " shards (each file holds at least one)");
  }
  idx->shards.resize(num_shards_);
  std::vector<uint64_t> at(idx->shard_files.size(), 0);  // each file's end so far
  std::vector<bool> used(at.size(), false);
  for (uint64_t i = 0; i < num_shards_; ++i) {
    ShardRef& s = idx->shards[i];
    if (v6 && !r_.Int(&s.file).ok()) return Truncated("shard " + std::to_string(i) + " file");
    if (!r_.Int(&s.nbytes).ok() || !r_.Int(&s.checksum).ok()) return Truncated("a shard");
    if (s.file >= num_files) {
      return Error("shard " + std::to_string(i) + " is in shard file " + std::to_string(s.file) +
                   " but there are " + std::to_string(num_files) + " shard files");
    }
    s.offset = at[s.file];
    std::optional<uint64_t> next = internal_base::CheckedAdd(at[s.file], s.nbytes);
    if (!next) return Error("shard sizes overflow");
    at[s.file] = *next;
    used[s.file] = true;
  }
  for (size_t f = 0; f < used.size(); ++f) {
    if (!used[f]) {
      return Error("shard file " + std::to_string(f) + " '" + ShardFileName(idx->shard_files[f]) +
                   "' holds no shard");
    }
  }
  return OkStatus();
}

Status IndexDecoder::Run(ManifestIndex* idx) {
  uint64_t magic;
  uint32_t version, flags;
  if (!r_.Int(&magic).ok() || !r_.Int(&version).ok() || !r_.Int(&flags).ok() ||
      !r_.Int(&idx->block_size).ok()) {
    return Truncated("the preamble");
  }
  if (flags != 0) return Error("unsupported flags 0x" + Hex16(flags));
  idx->version = version_ = version;
  const uint64_t b = idx->block_size;
  if (b < 4096 || (b & (b - 1)) != 0) {
    return Error("block size " + std::to_string(b) + " is not a power of two >= 4096");
  }
  if (version_ >= kIndexVersion) SP_RETURN_IF_ERROR(ShardFiles(idx));
  SP_RETURN_IF_ERROR(ShardTable(idx));
  SP_RETURN_IF_ERROR(Tensors(idx));
  SP_RETURN_IF_ERROR(version_ >= kIndexVersionV5 ? ObjectRuns(idx) : Objects(idx));
  return Tail(&idx->has_common, &idx->common, &idx->metadata_json);
}

}  // namespace

Result<ManifestIndex> DecodeIndex(std::string_view bytes, const std::string& name,
                                  const IndexKeep* keep) {
  const std::string prefix = "manifest index '" + name + "': ";
  if (bytes.size() < kMinIndex) {
    return DataLossError(prefix + "truncated: " + std::to_string(bytes.size()) +
                         " bytes, an index has at least " + std::to_string(kMinIndex));
  }
  if (!IsIndexVersion(EncodedVersion(bytes))) {
    return DataLossError(prefix + "not a version " + std::to_string(kIndexVersionV3) + " to " +
                         std::to_string(kIndexVersion) + " index");
  }
  const size_t body = bytes.size() - 8;
  uint64_t stored;
  std::memcpy(&stored, bytes.data() + body, 8);
  const uint64_t computed = Checksum64(bytes.data(), body);
  if (stored != computed) {
    return DataLossError(prefix + "checksum mismatch over bytes [0, " + std::to_string(body) +
                         "): stored " + Hex16(stored) + ", computed " + Hex16(computed));
  }
  ManifestIndex idx;
  SP_RETURN_IF_ERROR(IndexDecoder(bytes.substr(0, body), name, keep).Run(&idx));
  return idx;
}

namespace {

const TensorEntry* FindEntry(const ManifestIndex& index, const std::string& k) {
  auto it =
      std::lower_bound(index.tensors.begin(), index.tensors.end(), k,
                       [](const TensorEntry& t, const std::string& key) { return t.key < key; });
  return it != index.tensors.end() && it->key == k ? &*it : nullptr;
}

void AddObjectShards(const ManifestIndex& index, const std::vector<std::string>& object_keys,
                     std::vector<uint32_t>& out) {
  for (const std::string& k : object_keys) {
    auto it =
        std::lower_bound(index.objects.begin(), index.objects.end(), k,
                         [](const ObjectRun& o, const std::string& key) { return o.key < key; });
    for (; it != index.objects.end() && it->key == k; ++it) out.push_back(it->shard);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
}

}  // namespace

std::vector<uint32_t> ShardsForKeys(const ManifestIndex& index,
                                    const std::vector<std::string>& tensor_keys,
                                    const std::vector<std::string>& object_keys) {
  std::vector<uint32_t> out;
  for (const std::string& k : tensor_keys) {
    const TensorEntry* e = FindEntry(index, k);
    for (size_t i = 0; e != nullptr && i < e->parts.size(); ++i) out.push_back(e->parts[i].shard);
  }
  AddObjectShards(index, object_keys, out);
  return out;
}

std::vector<uint32_t> ShardsForBoxes(const ManifestIndex& index,
                                     const std::vector<KeyBoxes>& tensors,
                                     const std::vector<ObjectAt>& objects) {
  std::vector<uint32_t> out;
  for (const KeyBoxes& kb : tensors) {
    const TensorEntry* e = FindEntry(index, kb.key);
    if (e == nullptr) continue;
    for (size_t p = 0; p < e->parts.size(); ++p) {
      // A rank mismatch meets (the load names it; read everything).
      if (e->parts.size() == 1 || MeetsAny(kb.boxes, e->span(p))) {
        out.push_back(e->parts[p].shard);
      }
    }
  }
  for (const ObjectAt& o : objects) {
    // The last run of the key starting at or before the index (runs are
    // consecutive indices in row-major order, which compares as a Shape).
    auto it = std::upper_bound(index.objects.begin(), index.objects.end(), o,
                               [](const ObjectAt& a, const ObjectRun& r) {
                                 return std::tie(a.key, a.index) < std::tie(r.key, r.first);
                               });
    if (it == index.objects.begin()) continue;
    --it;
    if (it->key == o.key && o.index <= it->last) out.push_back(it->shard);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::vector<std::string> ObjectKeys(const ManifestIndex& index) {
  std::vector<std::string> out;
  for (const ObjectRun& r : index.objects) {
    if (out.empty() || out.back() != r.key) out.push_back(r.key);
  }
  return out;
}

}  // namespace shardpoint::internal_format
