// ConvertToDcp: any source (a shardpoint checkpoint, an HF model, a DCP
// directory) -> a PyTorch DCP directory in torch 1.13's layout, offline and
// streaming. Every stored chunk becomes one DCP tensor item (a torch.save
// archive) in the .distcp file named after the chunk's source file; objects
// become byte items that DCP loads back as their values
// (src/dcp/byte_item_writer.h). Written into "<dst>.partial", .metadata last,
// then renamed to <dst> (src/io/staged_output.h): a directory named <dst> is
// complete (on failure the partial directory is removed).
#include <chrono>
#include <map>

#include "shardpoint/checkpoint_kind.h"
#include "shardpoint/hf.h"
#include "src/checkpoint/reader.h"
#include "src/convert/stream.h"
#include "src/dcp/byte_item_writer.h"
#include "src/dcp/dcp_dir.h"
#include "src/dcp/metadata_writer.h"
#include "src/dcp/tensor_item_writer.h"
#include "src/format/checksum.h"
#include "src/io/path.h"
#include "src/io/staged_output.h"
#include "src/source/mapped_source.h"

using shardpoint::internal_checkpoint::DataFiles;
using shardpoint::internal_convert::IsFloatDType;
using shardpoint::internal_convert::OutTensor;
using shardpoint::internal_convert::RunConversion;
using shardpoint::internal_convert::StreamOptions;
using shardpoint::internal_convert::StreamPool;
using shardpoint::internal_convert::StreamTensors;
using shardpoint::internal_dcp::DcpMetadata;
using shardpoint::internal_dcp::DcpTensorMeta;
using shardpoint::internal_dcp::EncodeDcpByteItem;
using shardpoint::internal_dcp::EncodeDcpMetadata;
using shardpoint::internal_dcp::kDcpMetadataName;
using shardpoint::internal_dcp::ObjectSource;
using shardpoint::internal_dcp::TensorItemLayout;
using shardpoint::internal_format::Checksum64;
using shardpoint::internal_format::ChunkRecord;
using shardpoint::internal_format::ObjectRecord;
using shardpoint::internal_format::TensorRecord;
using shardpoint::internal_io::CallResources;
using shardpoint::internal_io::JoinPath;
using shardpoint::internal_io::StagedOutput;
using shardpoint::internal_source::MappedSource;
using shardpoint::internal_source::OpenSource;

namespace shardpoint {

namespace {

struct DcpFile {
  std::string name;  // "__<n>_0.distcp"
  uint64_t size = 0;
  int index = 0;  // in the list of files written
};

struct Item {
  TensorItemLayout layout;
  int file = 0;
  uint64_t offset = 0;  // of the archive in its file
};

// The byte item of object `o`: its stored bytes (checksum verified where the
// source has checksums), encoded as DCP loads it (src/dcp/byte_item_writer.h).
Result<std::string> ReadByteItem(const MappedSource& src, const std::string& src_dir,
                                 DataFiles* data, const ObjectRecord& o, bool from_dcp) {
  std::string bytes(o.nbytes, '\0');
  SP_ASSIGN_OR_RETURN(const ReadableFile* in, data->Get(o.file));
  if (!bytes.empty()) SP_RETURN_IF_ERROR(in->ReadAt(o.offset, bytes.size(), bytes.data()));
  if (src.has_checksums && Checksum64(bytes.data(), bytes.size()) != o.checksum) {
    return DataLossError("'" + src_dir + "' object '" + o.key + "': checksum mismatch in '" +
                         in->path() + "' bytes [" + std::to_string(o.offset) + ", +" +
                         std::to_string(o.nbytes) + ")");
  }
  Result<std::string> item =
      EncodeDcpByteItem(bytes, from_dcp ? ObjectSource::kDcp : ObjectSource::kShardpoint, o.key);
  if (!item.ok()) return item.status().WithContext("'" + src_dir + "'");
  return item;
}

// An object's byte item and where it goes.
struct ObjectOut {
  std::string item;  // the byte item
  DcpFile* f;
  uint64_t offset;
};

// The plan: items, their files and offsets, the metadata.
struct DcpPlan {
  std::map<uint32_t, DcpFile> files;  // by source file index; DcpFile pointers are stable
  DcpMetadata md;
  std::vector<Item> items;
  std::vector<OutTensor> outs;
  std::vector<ObjectOut> objects;
  std::string metadata;  // the encoded .metadata

  // `bytes` more at the end of the file of `source_file`: the file and where.
  std::pair<DcpFile*, uint64_t> Place(uint32_t source_file, uint64_t bytes) {
    DcpFile& f = files[source_file];
    if (f.name.empty()) {
      f.name = "__" + std::to_string(source_file) + "_0.distcp";
      f.index = static_cast<int>(files.size()) - 1;
    }
    const uint64_t at = f.size;
    f.size += bytes;
    return {&f, at};
  }
};

// Every chunk of every tensor: one tensor item.
Status PlanTensors(const MappedSource& src, const std::string& src_dir,
                   const ExportHfOptions& options, DcpPlan* plan) {
  DcpMetadata& md = plan->md;
  for (const TensorRecord& t : src.index.tensors) {
    DcpTensorMeta tm;
    tm.fqn = t.key;
    tm.dtype = options.dtype && IsFloatDType(t.dtype) ? *options.dtype : t.dtype;
    tm.shape = t.shape;
    for (const ChunkRecord& c : t.chunks) {
      Result<TensorItemLayout> l = TensorItemLayout::Plan(tm.dtype, c.box.shape, md.torch_major);
      if (!l.ok()) return l.status().WithContext("'" + src_dir + "' tensor '" + t.key + "'");
      auto [f, at] = plan->Place(c.file, l->size());
      md.storage[{t.key, c.box.offset}] = {f->name, at, l->size(), {}};
      plan->outs.push_back(
          {t.key, tm.dtype, c.box.num_elements(), 0, at + l->data_offset(), {{t.key, c.box, 0}}});
      plan->items.push_back({std::move(*l), 0, at});
      tm.chunks.push_back(c.box);
    }
    md.tensors.push_back(std::move(tm));
  }
  return OkStatus();
}

// Objects: read and encoded now (so one that cannot be written is refused
// before any file is) as byte items DCP loads back as their values.
Status PlanObjects(const MappedSource& src, const std::string& src_dir, Storage* storage,
                   DcpPlan* plan) {
  if (src.index.objects.empty()) return OkStatus();
  const bool from_dcp = src.checkpoint_kind == CheckpointKind::kPyTorchDcp;
  DataFiles data(storage, src.dir, &src.index, &src.views);
  for (const ObjectRecord& o : src.index.objects) {
    if (!o.index.empty()) {
      return FailedPreconditionError("'" + src_dir + "' object '" + o.key + "' is sharded over " +
                                     ShapeToString(o.grid) +
                                     ": DCP byte items have no shard index (not converted)");
    }
    SP_ASSIGN_OR_RETURN(std::string item, ReadByteItem(src, src_dir, &data, o, from_dcp));
    auto [f, at] = plan->Place(o.file, item.size());
    plan->md.bytes.push_back(o.key);
    plan->md.storage[{o.key, Shape{}}] = {f->name, at, item.size(), {}};
    plan->objects.push_back({std::move(item), f, at});
  }
  return OkStatus();
}

// The items' file indices, known once every file is placed.
void SetItemFiles(const MappedSource& src, DcpPlan* plan) {
  size_t i = 0;
  for (const TensorRecord& t : src.index.tensors) {
    for (const ChunkRecord& c : t.chunks) {
      plan->items[i].file = plan->files[c.file].index;
      plan->outs[i].file = plan->items[i].file;
      ++i;
    }
  }
}

// The .distcp files (tensor data streamed, then each item's other bytes and
// the byte items), synced, then .metadata, all in directory `w`.
Status WriteDcpFiles(const DcpPlan& plan, const MappedSource& src, Storage* storage,
                     const std::string& w, const ExportHfOptions& options, CallResources& res) {
  std::vector<std::unique_ptr<WritableFile>> out_files(plan.files.size());
  std::vector<WritableFile*> raw(plan.files.size());
  for (const auto& [n, f] : plan.files) {
    SP_ASSIGN_OR_RETURN(out_files[f.index], storage->NewWritableFile(JoinPath(w, f.name), {}));
    SP_RETURN_IF_ERROR(out_files[f.index]->Truncate(f.size));
    raw[f.index] = out_files[f.index].get();
  }
  std::vector<uint32_t> crcs;
  StreamOptions so{StreamPool(res), options.block_bytes, false, options.progress};
  so.crc32s = &crcs;
  SP_RETURN_IF_ERROR(StreamTensors(src, storage, raw, plan.outs, so, nullptr));
  const std::vector<Item>& items = plan.items;
  for (size_t i = 0; i < items.size(); ++i) {
    for (const auto& [at, bytes] : items[i].layout.OtherBytes(crcs[i])) {
      SP_RETURN_IF_ERROR(
          raw[items[i].file]->WriteAt(items[i].offset + at, bytes.data(), bytes.size()));
    }
  }
  for (const ObjectOut& x : plan.objects) {
    SP_RETURN_IF_ERROR(raw[x.f->index]->WriteAt(x.offset, x.item.data(), x.item.size()));
  }
  for (auto& f : out_files) {
    SP_RETURN_IF_ERROR(f->Sync());
    SP_RETURN_IF_ERROR(f->Close());
  }
  SP_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> m,
                      storage->NewWritableFile(JoinPath(w, kDcpMetadataName), {}));
  SP_RETURN_IF_ERROR(m->WriteAt(0, plan.metadata.data(), plan.metadata.size()));
  SP_RETURN_IF_ERROR(m->Sync());
  SP_RETURN_IF_ERROR(m->Close());
  return OkStatus();
}

Result<ExportHfStats> ConvertToDcpImpl(const std::string& src_dir, const std::string& dcp_dir,
                                       const HfMapping& mapping, const ExportHfOptions& options,
                                       CallResources& res) {
  const auto start = std::chrono::steady_clock::now();
  Storage* storage = res.storage();
  // Written into "<dst>.partial", renamed to <dst> once durable.
  SP_ASSIGN_OR_RETURN(StagedOutput out,
                      StagedOutput::Begin(storage, dcp_dir, options.overwrite, "convert --to dcp"));
  SP_ASSIGN_OR_RETURN(MappedSource src, OpenSource(storage, src_dir, mapping, options.variables));

  DcpPlan plan;
  plan.md.torch_major = options.dcp_torch_major;
  SP_RETURN_IF_ERROR(PlanTensors(src, src_dir, options, &plan));
  SP_RETURN_IF_ERROR(PlanObjects(src, src_dir, storage, &plan));
  std::sort(plan.md.bytes.begin(), plan.md.bytes.end());
  SP_ASSIGN_OR_RETURN(plan.metadata, EncodeDcpMetadata(plan.md));
  SetItemFiles(src, &plan);

  // On failure `out` removes the partial directory.
  SP_RETURN_IF_ERROR(WriteDcpFiles(plan, src, storage, out.dir(), options, res));
  SP_RETURN_IF_ERROR(out.Commit());
  if (!out.cleanup_error().empty()) res.Log("shardpoint: " + out.cleanup_error());

  ExportHfStats stats;
  stats.source_kind = src.checkpoint_kind;
  stats.files = static_cast<int>(plan.files.size());
  stats.tensors = static_cast<int64_t>(plan.md.tensors.size());
  for (const auto& [n, f] : plan.files) stats.bytes += f.size;
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return stats;
}

}  // namespace

Result<ExportHfStats> ConvertToDcp(const std::string& src_dir, const std::string& dcp_dir,
                                   const HfMapping& mapping, const ExportHfOptions& options) {
  return RunConversion("convert --to dcp", src_dir, dcp_dir, options, [&](CallResources& res) {
    return ConvertToDcpImpl(src_dir, dcp_dir, mapping, options, res);
  });
}

}  // namespace shardpoint
