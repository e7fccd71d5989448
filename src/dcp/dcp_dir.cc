#include "src/dcp/dcp_dir.h"

#include <algorithm>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "src/dcp/dp_buckets.h"
#include "src/dcp/nd_flattened.h"
#include "src/dcp/tensor_item.h"
#include "src/dcp/torch_dist.h"

using shardpoint::internal_format::ChunkRecord;
using shardpoint::internal_format::DecodeManifest;
using shardpoint::internal_format::EncodeManifest;
using shardpoint::internal_format::Manifest;
using shardpoint::internal_format::ObjectRecord;
using shardpoint::internal_format::TensorRecord;

namespace shardpoint::internal_dcp {
namespace {

constexpr uint64_t kMaxMetadataBytes = uint64_t{1} << 30;
// The transit encoding reuses the manifest format, whose file names must be
// "data/<name>".
constexpr std::string_view kTransitPrefix = "data/";

std::string Join(const std::string& dir, const std::string& name) {
  return dir.empty() || dir.back() == '/' ? dir + name : dir + "/" + name;
}

Status CheckFileName(const std::string& name, const std::string& what) {
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos ||
      name.find('\\') != std::string::npos || name.find('\0') != std::string::npos ||
      name.find("..") != std::string::npos) {
    return DataLossError("'" + what + "' names data file '" + name +
                         "', which is not a plain name inside the checkpoint directory");
  }
  return OkStatus();
}

// A view file (src/dcp/strided_file.h) of the strided tensor item `tb` at
// byte `item` of file `f`: its name is the file's, a backslash (which no DCP
// file name holds) and the item's offset.
uint32_t AddView(const TensorItemBytes& tb, uint32_t f, uint64_t item, const std::string& file,
                 DcpIndex* idx) {
  StridedView v;
  v.file = static_cast<uint32_t>(idx->m.files.size());
  v.base = f;
  v.storage_offset = item + tb.storage.data_offset;
  v.storage_elements = tb.tensor.storage_numel;
  v.element_size = static_cast<uint32_t>(DTypeSize(tb.tensor.dtype));
  v.first = tb.tensor.storage_offset;
  v.size = tb.tensor.size;
  v.stride = tb.tensor.stride;
  idx->m.files.push_back(file + "\\strided@" + std::to_string(item));
  idx->views.push_back(std::move(v));
  return idx->views.back().file;
}

// Builds a DcpIndex from a DCP directory: `.metadata`, then every tensor's
// chunks, the byte items and Megatron's torch_dist files. Files are opened
// when an item first names them.
class DcpIndexReader {
 public:
  DcpIndexReader(Storage* storage, const std::string& dir)
      : storage_(storage), dir_(dir), meta_path_(Join(dir, kDcpMetadataName)) {}

  Result<DcpIndex> Read() && {
    SP_RETURN_IF_ERROR(ReadMetadata());
    SP_RETURN_IF_ERROR(ListFiles());
    for (const DcpTensorMeta& tm : idx_.metadata.tensors) SP_RETURN_IF_ERROR(AddTensor(tm));
    for (const std::string& fqn : idx_.metadata.bytes) SP_RETURN_IF_ERROR(AddByteItem(fqn));
    SP_RETURN_IF_ERROR(AddTorchDist());
    return std::move(idx_);
  }

 private:
  Status ReadMetadata() {
    SP_ASSIGN_OR_RETURN(std::unique_ptr<ReadableFile> mf, storage_->NewReadableFile(meta_path_));
    SP_ASSIGN_OR_RETURN(uint64_t meta_size, mf->Size());
    if (meta_size > kMaxMetadataBytes) {
      return FailedPreconditionError("'" + meta_path_ + "' is " + std::to_string(meta_size) +
                                     " bytes (at most 1 GiB is read)");
    }
    std::string meta(meta_size, '\0');
    if (meta_size) SP_RETURN_IF_ERROR(mf->ReadAt(0, meta_size, meta.data()));
    SP_ASSIGN_OR_RETURN(idx_.metadata, DecodeDcpMetadata(meta, meta_path_));
    return OkStatus();
  }

  // Files: every relative path the storage data names, sorted.
  Status ListFiles() {
    for (const auto& [key, info] : idx_.metadata.storage) {
      SP_RETURN_IF_ERROR(CheckFileName(info.relative_path, meta_path_));
      idx_.m.files.push_back(info.relative_path);
    }
    std::vector<std::string>& names = idx_.m.files;
    std::sort(names.begin(), names.end());
    names.erase(std::unique(names.begin(), names.end()), names.end());
    files_.resize(names.size());
    sizes_.resize(names.size());
    return OkStatus();
  }

  // The index of the file `info` names, opened if not yet, once its item is
  // known to lie inside it untransformed.
  Result<uint32_t> FileOf(const DcpStorageInfo& info, const std::string& what) {
    const auto it = std::lower_bound(idx_.m.files.begin(), idx_.m.files.end(), info.relative_path);
    const uint32_t f = static_cast<uint32_t>(it - idx_.m.files.begin());
    if (!files_[f]) {
      SP_ASSIGN_OR_RETURN(files_[f], storage_->NewReadableFile(Join(dir_, info.relative_path)));
      SP_ASSIGN_OR_RETURN(sizes_[f], files_[f]->Size());
    }
    if (!info.transforms.empty()) {
      std::string t;
      for (const std::string& d : info.transforms) t += (t.empty() ? "" : ", ") + d;
      return FailedPreconditionError(what + " in '" + info.relative_path +
                                     "' is stored through transforms (" + t +
                                     "), which shardpoint does not decode");
    }
    if (info.offset > sizes_[f] || info.length > sizes_[f] - info.offset) {
      return DataLossError(what + ": bytes [" + std::to_string(info.offset) + ", " +
                           std::to_string(info.offset + info.length) + ") of '" +
                           info.relative_path + "' lie past its end (" + std::to_string(sizes_[f]) +
                           " bytes)");
    }
    return f;
  }

  Status AddTensor(const DcpTensorMeta& tm) {
    TensorRecord t;
    t.key = tm.fqn;
    t.dtype = tm.dtype;
    t.shape = tm.shape;
    const size_t first_entry = idx_.entries.size();
    for (const Box& box : tm.chunks) SP_RETURN_IF_ERROR(AddChunk(tm, box, &t));
    std::sort(t.chunks.begin(), t.chunks.end(),
              [](const ChunkRecord& a, const ChunkRecord& b) { return a.box < b.box; });
    // This tensor's entries: their chunk's index in the sorted list.
    for (size_t e = first_entry; e < idx_.entries.size(); ++e) {
      const Box& box = tm.chunks[e - first_entry];
      if (box.empty()) continue;
      auto it = std::lower_bound(t.chunks.begin(), t.chunks.end(), box,
                                 [](const ChunkRecord& c, const Box& b) { return c.box < b; });
      idx_.entries[e].chunk = it - t.chunks.begin();
    }
    for (size_t i = 1; i < t.chunks.size(); ++i) {
      if (t.chunks[i].box == t.chunks[i - 1].box) {
        return DataLossError("'" + meta_path_ + "': '" + tm.fqn + "' lists chunk " +
                             t.chunks[i].box.ToString() + " twice");
      }
    }
    // Megatron-Core's N-D flattened tensors: rebuilt in their original shape.
    const auto& nd_flattened = idx_.metadata.nd_flattened;
    if (auto nd = nd_flattened.find(tm.fqn); nd != nd_flattened.end()) {
      Result<std::vector<int64_t>> moved = UnflattenNdTensor(nd->second, &t);
      if (!moved.ok()) return moved.status().WithContext("'" + meta_path_ + "'");
      for (size_t e = first_entry; e < idx_.entries.size(); ++e) {
        if (idx_.entries[e].chunk >= 0) idx_.entries[e].chunk = (*moved)[idx_.entries[e].chunk];
      }
    }
    idx_.m.tensors.push_back(std::move(t));
    return OkStatus();
  }

  // Chunk `box` of `tm`: its checked entry, and its chunk record in `t`
  // unless it is empty.
  Status AddChunk(const DcpTensorMeta& tm, const Box& box, TensorRecord* t) {
    const std::string what = "'" + tm.fqn + "' chunk " + box.ToString();
    auto it = idx_.metadata.storage.find({tm.fqn, box.offset});
    if (it == idx_.metadata.storage.end()) {
      return DataLossError("'" + meta_path_ + "': " + what + " has no storage_data entry");
    }
    const DcpStorageInfo& info = it->second;
    SP_ASSIGN_OR_RETURN(uint32_t f, FileOf(info, what));
    const std::string item = what + " (bytes [" + std::to_string(info.offset) + ", " +
                             std::to_string(info.offset + info.length) + ") of '" +
                             Join(dir_, info.relative_path) + "')";
    const ReadableFile* rf = files_[f].get();
    const uint64_t base = info.offset, len = info.length;
    ZipReadAt read = [rf, base, len](uint64_t off, size_t n, char* dst) -> Status {
      if (off > len || n > len - off) return DataLossError("read outside the item");
      return rf->ReadAt(base + off, n, dst);
    };
    SP_ASSIGN_OR_RETURN(TensorItemBytes tb, LocateTensorItem(len, read, item));
    if (tb.tensor.size != box.shape) {
      return DataLossError(item + ": the saved tensor has size " + ShapeToString(tb.tensor.size) +
                           ", the metadata says " + ShapeToString(box.shape));
    }
    if (tb.tensor.dtype != tm.dtype) {
      return DataLossError(item + ": the saved tensor is " +
                           std::string(DTypeName(tb.tensor.dtype)) + ", the metadata says " +
                           std::string(DTypeName(tm.dtype)));
    }
    idx_.entries.push_back(
        {what, tm.fqn, -1, f, base + tb.storage.data_offset, tb.storage.size, tb.storage.crc32});
    if (box.empty()) return OkStatus();
    ChunkRecord c;
    c.box = box;
    c.file = f;
    c.offset = base + tb.offset;
    c.nbytes = static_cast<uint64_t>(box.num_elements()) * DTypeSize(tm.dtype);
    if (!tb.tensor.row_major) {
      // Stored with strides: the chunk is bytes [0, nbytes) of a view file.
      c.file = AddView(tb, f, base, info.relative_path, &idx_);
      c.offset = 0;
    }
    t->chunks.push_back(std::move(c));
    return OkStatus();
  }

  Status AddByteItem(const std::string& fqn) {
    auto it = idx_.metadata.storage.find({fqn, Shape{}});
    const std::string what = "byte item '" + fqn + "'";
    if (it == idx_.metadata.storage.end()) {
      return DataLossError("'" + meta_path_ + "': " + what + " has no storage_data entry");
    }
    SP_ASSIGN_OR_RETURN(uint32_t f, FileOf(it->second, what));
    ObjectRecord o;
    o.key = fqn;
    o.file = f;
    o.offset = it->second.offset;
    o.nbytes = it->second.length;
    idx_.m.objects.push_back(std::move(o));
    return OkStatus();
  }

  // Megatron torch_dist: metadata.json and common.pt become the metadata
  // (rendered, for inspect) and the common state (as stored).
  Status AddTorchDist() {
    SP_ASSIGN_OR_RETURN(std::optional<TorchDistInfo> td, ReadTorchDist(storage_, dir_));
    if (!td) return OkStatus();
    nlohmann::ordered_json md;
    md["megatron_torch_dist"]["metadata.json"] = nlohmann::ordered_json::parse(td->config_json);
    if (td->has_common) {
      md["megatron_torch_dist"]["common.pt"] = nlohmann::ordered_json::parse(td->common_json);
      idx_.m.has_common = true;
      idx_.m.common = std::move(td->common_bytes);
    }
    // The distributed optimizer's dp_reshardable buckets, rebuilt per parameter.
    Result<DpBucketRebuild> dp = RebuildDpBuckets(DpBucketArgsFromCommon(td->common_json), &idx_.m);
    if (!dp.ok()) return dp.status().WithContext("'" + meta_path_ + "'");
    if (dp->buckets > 0) {
      md["megatron_torch_dist"]["dp_reshardable"] =
          dp->not_rebuilt.empty() ? nlohmann::ordered_json{{"rebuilt_tensors", dp->params}}
                                  : nlohmann::ordered_json{{"not_rebuilt", dp->not_rebuilt}};
    }
    idx_.m.metadata_json =
        md.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
    return OkStatus();
  }

  Storage* storage_;
  const std::string& dir_;
  const std::string meta_path_;
  DcpIndex idx_;
  std::vector<std::unique_ptr<ReadableFile>> files_;  // by index in idx_.m.files
  std::vector<uint64_t> sizes_;
};

}  // namespace

Result<DcpIndex> ReadDcpIndex(Storage* storage, const std::string& dir) {
  return DcpIndexReader(storage, dir).Read();
}

std::string EncodeDcpIndex(const Manifest& m, const std::vector<StridedView>& views) {
  Manifest t = m;
  for (std::string& f : t.files) f = std::string(kTransitPrefix) + f;
  internal_base::ByteWriter w;
  w.Blob(EncodeManifest(t));
  EncodeStridedViews(views, &w);
  return std::move(w.str());
}

Result<DcpTransitIndex> DecodeDcpIndex(std::string_view bytes, const std::string& dir) {
  const std::string what = "index of '" + Join(dir, kDcpMetadataName) + "'";
  internal_base::ByteReader r(bytes, what);
  std::string manifest;
  SP_RETURN_IF_ERROR(r.Blob(&manifest));
  DcpTransitIndex out;
  SP_ASSIGN_OR_RETURN(out.m, DecodeManifest(manifest, Join(dir, kDcpMetadataName)));
  for (std::string& f : out.m.files) f = f.substr(kTransitPrefix.size());
  SP_ASSIGN_OR_RETURN(out.views, DecodeStridedViews(&r, out.m.files.size(), what));
  SP_RETURN_IF_ERROR(r.ExpectEnd());
  return out;
}

}  // namespace shardpoint::internal_dcp
