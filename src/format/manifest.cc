// Manifest encoding, format v2 (and v1, which lacks the block size and the
// block checksums). The byte layout is written down in
// docs/format.md; keep the two in step.
#include "src/format/manifest.h"

#include <algorithm>
#include <cstring>
#include <tuple>

#include "src/base/bytes.h"
#include "src/base/checked.h"
#include "src/base/hex.h"
#include "src/format/checksum.h"
#include "src/format/field_reader.h"

using shardpoint::internal_base::ByteWriter;
using shardpoint::internal_base::CheckedAdd;
using shardpoint::internal_base::Hex16;

namespace shardpoint::internal_format {
namespace {

constexpr char kMagic[8] = {'S', 'H', 'R', 'D', 'P', 'N', 'T', '\0'};
// magic, version, flags, 3 section counts, has_common, common and metadata
// lengths, trailing checksum.
constexpr size_t kMinSize = 8 + 4 + 4 + 8 + 8 + 8 + 1 + 8 + 8 + 8;
// Smallest encodings, used to bound counts before reserving memory.
constexpr size_t kMinFile = 4;
constexpr size_t kMinTensor = 4 + 1 + 1 + 8;
constexpr size_t kMinChunkFixed = 4 + 8 + 8 + 8;  // plus 16 bytes per dim

size_t EncodedSize(const Manifest& m) {
  size_t n = kMinSize + 8;
  for (const std::string& f : m.files) n += 4 + f.size();
  for (const TensorRecord& t : m.tensors) {
    n += kMinTensor + t.key.size() + 8 * t.shape.size();
    n += t.chunks.size() * (kMinChunkFixed + 8 + 16 * t.shape.size());
    for (const ChunkRecord& c : t.chunks) n += 8 * c.block_sums.size();
  }
  for (const ObjectRecord& o : m.objects) {
    n += kMinObjectRecordBytes + o.key.size() + 8 * (o.index.size() + o.grid.size());
  }
  return n + m.common.size() + m.metadata_json.size();
}

}  // namespace

int64_t Manifest::FindTensor(std::string_view key) const {
  auto it = std::lower_bound(tensors.begin(), tensors.end(), key,
                             [](const TensorRecord& t, std::string_view k) { return t.key < k; });
  if (it == tensors.end() || it->key != key) return -1;
  return it - tensors.begin();
}

std::string EncodeManifest(const Manifest& m) {
  ByteWriter w;
  w.Reserve(EncodedSize(m));
  w.Raw(kMagic, sizeof(kMagic));
  const bool v2 = m.version >= 2;
  w.U32(v2 ? 2 : 1);
  w.U32(0);  // flags: none defined
  if (v2) w.U64(m.block_size);
  w.U64(m.files.size());
  for (const std::string& f : m.files) w.Str(f);
  w.U64(m.tensors.size());
  for (const TensorRecord& t : m.tensors) {
    w.Str(t.key);
    w.U8(static_cast<uint8_t>(t.dtype));
    // Rank and dims written as given (not Ints, which refuses rank > kMaxRank):
    // saves validate ranks up front, and tests encode bad ranks for the decoder.
    w.U8(static_cast<uint8_t>(t.shape.size()));
    w.Dims(t.shape);
    w.U64(t.chunks.size());
    for (const ChunkRecord& c : t.chunks) {
      w.Dims(c.box.offset);
      w.Dims(c.box.shape);
      w.U32(c.file);
      w.U64(c.offset);
      w.U64(c.nbytes);
      w.U64(c.checksum);
      if (!v2) continue;
      w.U64(c.block_sums.size());
      for (uint64_t b : c.block_sums) w.U64(b);
    }
  }
  w.U64(m.objects.size());
  for (const ObjectRecord& o : m.objects) {
    w.Str(o.key);
    w.U8(static_cast<uint8_t>(o.index.size()));
    w.Dims(o.index);
    w.U8(static_cast<uint8_t>(o.grid.size()));
    w.Dims(o.grid);
    w.U32(o.file);
    w.U64(o.offset);
    w.U64(o.nbytes);
    w.U64(o.checksum);
  }
  w.U8(m.has_common ? 1 : 0);
  w.Blob(m.has_common ? std::string_view(m.common) : std::string_view());
  w.Blob(m.metadata_json);
  w.U64(Checksum64(w.str().data(), w.str().size()));
  return std::move(w.str());
}

namespace {

// Decoding state: the shared field reader (field_reader.h) and the version.
class Decoder : public FieldReader {
 public:
  // `keep` and `decoded`: DecodeManifest's chunk filter (both null: keep all).
  Decoder(std::string_view body, const std::string& name, const ChunkFilter* keep = nullptr,
          std::vector<uint64_t>* decoded = nullptr)
      : FieldReader(body, "manifest", name), keep_(keep), decoded_(decoded) {}

  Status Run(Manifest* m);

 private:
  Status Files(Manifest* m);
  Status Tensor(size_t num_files, TensorRecord* t);
  // Chunk i of `t`, which must lie after `previous` (the chunk before it).
  Status Chunk(const TensorRecord& t, size_t i, uint64_t elem_size, size_t num_files,
               const Box* previous, ChunkRecord* c);
  Status Object(size_t num_files, ObjectRecord* o);

  Status BlockSums(const TensorRecord& t, size_t i, ChunkRecord* c);

  const ChunkFilter* keep_;
  std::vector<uint64_t>* decoded_;
  size_t num_files_ = 0;
  uint32_t version_ = 1;
  uint64_t block_size_ = 0;
};

// "data/<name>": relative, one level, no "..", no NUL.
bool ValidFileName(std::string_view f) {
  constexpr std::string_view kPrefix = "data/";
  if (f.size() <= kPrefix.size() || f.substr(0, kPrefix.size()) != kPrefix) return false;
  std::string_view rest = f.substr(kPrefix.size());
  return rest != "." && rest.find('/') == std::string_view::npos &&
         rest.find('\0') == std::string_view::npos && rest.find("..") == std::string_view::npos;
}

Status Decoder::Files(Manifest* m) {
  uint64_t n;
  SP_RETURN_IF_ERROR(Count(kMinFile, "file", &n));
  // Filtered, the names stay views into the input (keep_->files).
  std::vector<std::string_view> views(n);
  for (uint64_t i = 0; i < n; ++i) {
    if (!r_.StrView(&views[i]).ok()) return Truncated("file name " + std::to_string(i));
    if (!ValidFileName(views[i])) {
      return Error("file name " + std::to_string(i) + " '" + std::string(views[i]) +
                   "' is not of the form data/<name> (relative, no '..', no further '/')");
    }
  }
  num_files_ = n;
  if (keep_ != nullptr && keep_->files != nullptr) {
    keep_->files->assign(views.begin(), views.end());
  } else {
    m->files.assign(views.begin(), views.end());
  }
  std::vector<std::string_view> sorted = std::move(views);
  std::sort(sorted.begin(), sorted.end());
  auto dup = std::adjacent_find(sorted.begin(), sorted.end());
  if (dup != sorted.end()) return Error("file name '" + std::string(*dup) + "' listed twice");
  return OkStatus();
}

Status Decoder::Tensor(size_t num_files, TensorRecord* t) {
  SP_RETURN_IF_ERROR(TensorHead(&t->key, &t->dtype, &t->shape));
  const size_t rank = t->shape.size();
  uint64_t n;
  const size_t v2_extra = version_ >= 2 ? 8 : 0;
  SP_RETURN_IF_ERROR(Count(
      kMinChunkFixed + v2_extra + 16 * rank, [&] { return "tensor '" + t->key + "' chunk"; }, &n));
  const uint64_t elem_size = DTypeSize(t->dtype);
  if (keep_ == nullptr) {
    t->chunks.resize(n);
    for (uint64_t i = 0; i < n; ++i) {
      const Box* previous = i > 0 ? &t->chunks[i - 1].box : nullptr;
      SP_RETURN_IF_ERROR(Chunk(*t, i, elem_size, num_files, previous, &t->chunks[i]));
    }
    return OkStatus();
  }
  // Filtered: each chunk is decoded into `cur`, whose buffers the next one
  // reuses unless it is kept (copied out).
  const std::vector<Box>* boxes = keep_->boxes(t->key);
  ChunkRecord cur, prev;
  for (uint64_t i = 0; i < n; ++i) {
    SP_RETURN_IF_ERROR(Chunk(*t, i, elem_size, num_files, i > 0 ? &prev.box : nullptr, &cur));
    if (boxes != nullptr && (cur.box.empty() || MeetsAny(*boxes, cur.box))) {
      t->chunks.push_back(cur);
    }
    std::swap(cur, prev);
  }
  decoded_->push_back(n);
  return OkStatus();
}

Status Decoder::Chunk(const TensorRecord& t, size_t i, uint64_t elem_size, size_t num_files,
                      const Box* previous, ChunkRecord* c) {
  const size_t rank = t.shape.size();
  const size_t at = r_.pos();
  if (!r_.Dims(rank, &c->box.offset).ok() || !r_.Dims(rank, &c->box.shape).ok() ||
      !r_.Int(&c->file).ok() || !r_.Int(&c->offset).ok() || !r_.Int(&c->nbytes).ok() ||
      !r_.Int(&c->checksum).ok()) {
    return Truncated("tensor '" + t.key + "' chunk " + std::to_string(i));
  }
  auto fail = [&](const std::string& msg) {
    return Error("tensor '" + t.key + "' chunk " + std::to_string(i) + " (at byte " +
                 std::to_string(at) + "): " + msg);
  };
  // Inside the global shape, whose element count is known not to overflow,
  // so neither does the chunk's.
  uint64_t numel = 1;
  for (size_t d = 0; d < rank; ++d) {
    int64_t off = c->box.offset[d], ext = c->box.shape[d];
    if (off < 0 || ext < 0 || off > t.shape[d] || ext > t.shape[d] - off) {
      return fail("box " + c->box.ToString() + " lies outside shape " + ShapeToString(t.shape));
    }
    numel *= static_cast<uint64_t>(ext);
  }
  if (c->nbytes != numel * elem_size) {
    return fail("nbytes " + std::to_string(c->nbytes) + " but box " + c->box.ToString() +
                " holds " + std::to_string(numel * elem_size) + " bytes");
  }
  if (c->file >= num_files) {
    return fail("file index " + std::to_string(c->file) + " but there are " +
                std::to_string(num_files) + " files");
  }
  if (!CheckedAdd(c->offset, c->nbytes)) {
    return fail("byte range offset " + std::to_string(c->offset) + " + " +
                std::to_string(c->nbytes) + " overflows");
  }
  if (previous != nullptr && !(*previous < c->box)) {
    return fail("box " + c->box.ToString() + " is not after the previous chunk's box " +
                previous->ToString() + " (chunks must be sorted and unique)");
  }
  return version_ >= 2 ? BlockSums(t, i, c) : OkStatus();
}

// v2: u64 K, then K block checksums; K is 0 or the chunk's block count.
Status Decoder::BlockSums(const TensorRecord& t, size_t i, ChunkRecord* c) {
  auto what = [&] {
    return "tensor '" + t.key + "' chunk " + std::to_string(i) + " block checksum";
  };
  uint64_t k;
  SP_RETURN_IF_ERROR(Count(8, what, &k));
  const uint64_t want = NumBlocks(c->nbytes, block_size_);
  if (k != 0 && k != want) {
    return Error(what() + " count " + std::to_string(k) + " but its " + std::to_string(c->nbytes) +
                 " bytes make " + std::to_string(want) + " blocks of " +
                 std::to_string(block_size_));
  }
  c->block_sums.resize(k);
  // Bounded by ReadCount, so the read cannot fail.
  if (!r_.Raw(c->block_sums.data(), k * 8).ok()) return Truncated(what() + "s");
  return OkStatus();
}

Status Decoder::Object(size_t num_files, ObjectRecord* o) {
  SP_RETURN_IF_ERROR(ObjectHead(&o->key, &o->index, &o->grid));
  if (!r_.Int(&o->file).ok() || !r_.Int(&o->offset).ok() || !r_.Int(&o->nbytes).ok() ||
      !r_.Int(&o->checksum).ok()) {
    return Truncated("object '" + o->key + "' location");
  }
  auto where = [&] { return "object '" + o->key + "' index " + ShapeToString(o->index); };
  if (o->file >= num_files) {
    return Error(where() + " has file index " + std::to_string(o->file) + " but there are " +
                 std::to_string(num_files) + " files");
  }
  if (!CheckedAdd(o->offset, o->nbytes)) {
    return Error(where() + " byte range offset " + std::to_string(o->offset) + " + " +
                 std::to_string(o->nbytes) + " overflows");
  }
  return OkStatus();
}

Status Decoder::Run(Manifest* m) {
  uint64_t magic;
  uint32_t version, flags;
  if (!r_.Int(&magic).ok() || !r_.Int(&version).ok() || !r_.Int(&flags).ok())
    return Truncated("the preamble");
  if (flags != 0) return Error("unsupported flags 0x" + Hex16(flags));
  m->version = version_ = version;
  if (version >= 2) {
    if (!r_.Int(&block_size_).ok()) return Truncated("the block size");
    if (block_size_ < 4096 || (block_size_ & (block_size_ - 1)) != 0) {
      return Error("block size " + std::to_string(block_size_) + " is not a power of two >= 4096");
    }
  }
  m->block_size = block_size_;
  SP_RETURN_IF_ERROR(Files(m));

  uint64_t n;
  SP_RETURN_IF_ERROR(Count(kMinTensor, "tensor", &n));
  m->tensors.resize(n);
  for (uint64_t i = 0; i < n; ++i) {
    SP_RETURN_IF_ERROR(Tensor(num_files_, &m->tensors[i]));
    if (i > 0 && !(m->tensors[i - 1].key < m->tensors[i].key)) {
      return Error("tensor '" + m->tensors[i].key + "' is not after '" + m->tensors[i - 1].key +
                   "' (keys must be sorted and unique)");
    }
  }

  SP_RETURN_IF_ERROR(Count(kMinObjectRecordBytes, "object", &n));
  m->objects.resize(n);
  for (uint64_t i = 0; i < n; ++i) {
    ObjectRecord& o = m->objects[i];
    SP_RETURN_IF_ERROR(Object(num_files_, &o));
    if (i > 0) {
      const ObjectRecord& p = m->objects[i - 1];
      if (!(std::tie(p.key, p.index) < std::tie(o.key, o.index))) {
        return Error("object '" + o.key + "' index " + ShapeToString(o.index) +
                     " is not after the previous object (objects must be sorted by (key, "
                     "index) and unique)");
      }
    }
  }

  return Tail(&m->has_common, &m->common, &m->metadata_json);
}

Result<Manifest> DecodeManifestImpl(std::string_view bytes, const std::string& name,
                                    const ChunkFilter* keep, std::vector<uint64_t>* decoded) {
  const std::string prefix = "manifest '" + name + "': ";
  // Stage 1: size, magic, version, checksum; nothing is allocated from the input before.
  if (bytes.size() < 16) {
    return DataLossError(prefix + "truncated: " + std::to_string(bytes.size()) +
                         " bytes, a manifest has at least " + std::to_string(kMinSize));
  }
  if (std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) {
    return DataLossError(prefix + "bad magic (not a shardpoint manifest)");
  }
  uint32_t version;
  std::memcpy(&version, bytes.data() + 8, 4);
  if (version != 1 && version != kFormatVersion) {
    return DataLossError(prefix + "unsupported format version " + std::to_string(version));
  }
  const size_t min_size = kMinSize + (version >= 2 ? 8 : 0);
  if (bytes.size() < min_size) {
    return DataLossError(prefix + "truncated: " + std::to_string(bytes.size()) +
                         " bytes, a manifest has at least " + std::to_string(min_size));
  }
  const size_t body = bytes.size() - 8;
  uint64_t stored;
  std::memcpy(&stored, bytes.data() + body, 8);
  uint64_t computed = Checksum64(bytes.data(), body);
  if (stored != computed) {
    return DataLossError(prefix + "manifest checksum mismatch over bytes [0, " +
                         std::to_string(body) + "): stored " + Hex16(stored) + ", computed " +
                         Hex16(computed));
  }
  // Stage 2: structure and semantics, every count bounded before use.
  Manifest m;
  SP_RETURN_IF_ERROR(Decoder(bytes.substr(0, body), name, keep, decoded).Run(&m));
  return m;
}

}  // namespace

Result<Manifest> DecodeManifest(std::string_view bytes, const std::string& name) {
  return DecodeManifestImpl(bytes, name, nullptr, nullptr);
}

Result<Manifest> DecodeManifest(std::string_view bytes, const std::string& name,
                                const ChunkFilter& keep, std::vector<uint64_t>* decoded) {
  decoded->clear();
  return DecodeManifestImpl(bytes, name, &keep, decoded);
}

// Without building the intersection: a loading rank tests every chunk of
// its keys' records against its boxes.
bool MeetsAny(const std::vector<Box>& boxes, const Box& box) {
  for (const Box& b : boxes) {
    if (b.rank() != box.rank()) return true;
    bool meets = true;
    for (size_t d = 0; d < b.rank() && meets; ++d) {
      meets = std::max(b.offset[d], box.offset[d]) <
              std::min(b.offset[d] + b.shape[d], box.offset[d] + box.shape[d]);
    }
    if (meets) return true;
  }
  return false;
}

}  // namespace shardpoint::internal_format
