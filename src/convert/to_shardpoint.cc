// ConvertHfToShardpoint: an HF model -> a shardpoint checkpoint, offline and
// streaming. One data file; every mapped tensor in chunks of whole rows of at
// most block_bytes (one row at least), each with its checksum; then the
// manifest, in "<ckpt>.partial" renamed into place (src/io/staged_output.h).
#include <chrono>
#include <nlohmann/json.hpp>

#include "shardpoint/hf.h"
#include "src/checkpoint/commit.h"
#include "src/convert/convert_source.h"
#include "src/convert/stream.h"
#include "src/format/safetensors.h"
#include "src/io/path.h"
#include "src/io/staged_output.h"
#include "src/plan/save_plan.h"
#include "src/source/mapped_source.h"

using shardpoint::internal_checkpoint::CommitCheckpoint;
using shardpoint::internal_convert::IsFloatDType;
using shardpoint::internal_convert::OutTensor;
using shardpoint::internal_convert::RunConversion;
using shardpoint::internal_convert::StreamOptions;
using shardpoint::internal_convert::StreamPool;
using shardpoint::internal_convert::StreamTensors;
using shardpoint::internal_format::AssignSafetensorsOffsets;
using shardpoint::internal_format::ChunkRecord;
using shardpoint::internal_format::EncodeDataFileHeader;
using shardpoint::internal_format::kDataDir;
using shardpoint::internal_format::Manifest;
using shardpoint::internal_format::SafetensorsEntry;
using shardpoint::internal_format::TensorRecord;
using shardpoint::internal_io::CallResources;
using shardpoint::internal_io::JoinPath;
using shardpoint::internal_io::StagedOutput;
using shardpoint::internal_plan::ChunkEntryName;
using shardpoint::internal_source::MappedSource;
using shardpoint::internal_source::OpenSource;

namespace shardpoint {

namespace {

std::vector<Box> RowBlocks(const Shape& shape, DType dtype, size_t block_bytes) {
  if (shape.empty() || shape[0] == 0) return {Box::Whole(shape)};
  int64_t row = static_cast<int64_t>(DTypeSize(dtype));
  for (size_t d = 1; d < shape.size(); ++d) row *= shape[d];
  const int64_t rows =
      row == 0 ? shape[0] : std::max<int64_t>(1, static_cast<int64_t>(block_bytes) / row);
  std::vector<Box> out;
  for (int64_t r = 0; r < shape[0]; r += rows) {
    Box b = Box::Whole(shape);
    b.offset[0] = r;
    b.shape[0] = std::min(rows, shape[0] - r);
    out.push_back(b);
  }
  return out;
}

// The checkpoint's metadata: the mapping's name and the HF config, if any.
std::string HfMetadataJson(const HfMapping& mapping, const std::string& config_json) {
  nlohmann::json md;
  md["hf"]["mapping"] = mapping.name;
  if (!config_json.empty()) {
    nlohmann::json c = nlohmann::json::parse(config_json, nullptr, false);
    if (!c.is_discarded()) md["hf"]["config"] = c;
  }
  return md.dump();
}

}  // namespace

namespace internal_convert {

// A PyTorch DCP directory converts as is (its keys are kept; byte items are
// not copied).
Result<ExportHfStats> ConvertSourceToShardpoint(const MappedSource& src,
                                                const std::string& ckpt_dir,
                                                const HfMapping& mapping,
                                                const ExportHfOptions& options, CallResources& res,
                                                std::chrono::steady_clock::time_point start) {
  Storage* storage = res.storage();
  Manifest m;
  m.files = {std::string(kDataDir) + "/0.safetensors"};
  m.metadata_json = HfMetadataJson(mapping, src.config_json);

  // Chunks, ordered in the file by element size (largest first), then key.
  struct Ref {
    size_t tensor, chunk;
  };
  std::vector<Ref> refs;
  for (const TensorRecord& t : src.index.tensors) {
    TensorRecord r;
    r.key = t.key;
    r.dtype = options.dtype && IsFloatDType(t.dtype) ? *options.dtype : t.dtype;
    r.shape = t.shape;
    for (const Box& b : RowBlocks(t.shape, r.dtype, options.block_bytes)) {
      r.chunks.push_back(
          {b, 0, 0, static_cast<uint64_t>(b.num_elements()) * DTypeSize(r.dtype), 0, {}});
      refs.push_back({m.tensors.size(), r.chunks.size() - 1});
    }
    m.tensors.push_back(std::move(r));
  }
  std::stable_sort(refs.begin(), refs.end(), [&](const Ref& a, const Ref& b) {
    return DTypeSize(m.tensors[a.tensor].dtype) > DTypeSize(m.tensors[b.tensor].dtype);
  });
  std::vector<SafetensorsEntry> entries;
  for (const Ref& r : refs) {
    const TensorRecord& t = m.tensors[r.tensor];
    entries.push_back({ChunkEntryName(t.key, static_cast<int64_t>(r.chunk)), t.dtype,
                       t.chunks[r.chunk].box.shape, 0, 0});
  }
  const uint64_t data_bytes = AssignSafetensorsOffsets(&entries);
  const std::string header = EncodeDataFileHeader(entries);
  std::vector<OutTensor> outs;
  for (size_t i = 0; i < refs.size(); ++i) {
    TensorRecord& t = m.tensors[refs[i].tensor];
    ChunkRecord& c = t.chunks[refs[i].chunk];
    c.offset = header.size() + entries[i].begin;
    outs.push_back({t.key, t.dtype, c.box.num_elements(), 0, c.offset, {{t.key, c.box, 0}}});
  }

  // Written into "<ckpt>.partial" (data, then the manifest), renamed to
  // <ckpt> once durable (src/io/staged_output.h).
  SP_ASSIGN_OR_RETURN(StagedOutput out,
                      StagedOutput::Begin(storage, ckpt_dir, options.overwrite, "convert"));
  const std::string& w = out.dir();
  SP_RETURN_IF_ERROR(storage->CreateDirs(JoinPath(w, kDataDir)));
  SP_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> file,
                      storage->NewWritableFile(JoinPath(w, m.files[0]), {}));
  SP_RETURN_IF_ERROR(file->WriteAt(0, header.data(), header.size()));
  SP_RETURN_IF_ERROR(file->Truncate(header.size() + data_bytes));
  std::vector<uint64_t> sums;
  SP_RETURN_IF_ERROR(StreamTensors(
      src, storage, {file.get()}, outs,
      StreamOptions{StreamPool(res), options.block_bytes, true, options.progress}, &sums));
  SP_RETURN_IF_ERROR(file->Sync());
  SP_RETURN_IF_ERROR(file->Close());
  for (size_t i = 0; i < refs.size(); ++i) {
    m.tensors[refs[i].tensor].chunks[refs[i].chunk].checksum = sums[i];
  }
  std::string previous;  // none: `w` is new
  SP_RETURN_IF_ERROR(CommitCheckpoint(storage, w, w, m, &previous));
  SP_RETURN_IF_ERROR(out.Commit());
  if (!out.cleanup_error().empty()) res.Log("shardpoint: " + out.cleanup_error());
  ExportHfStats stats;
  stats.source_kind = src.checkpoint_kind;
  stats.files = 1;
  stats.tensors = static_cast<int64_t>(m.tensors.size());
  stats.bytes = data_bytes;
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return stats;
}

}  // namespace internal_convert

Result<ExportHfStats> ConvertHfToShardpoint(const std::string& hf_dir, const std::string& ckpt_dir,
                                            const HfMapping& mapping,
                                            const ExportHfOptions& options) {
  return RunConversion(
      "convert", hf_dir, ckpt_dir, options, [&](CallResources& res) -> Result<ExportHfStats> {
        const auto start = std::chrono::steady_clock::now();
        SP_ASSIGN_OR_RETURN(MappedSource src,
                            OpenSource(res.storage(), hf_dir, mapping, options.variables));
        return internal_convert::ConvertSourceToShardpoint(src, ckpt_dir, mapping, options, res,
                                                           start);
      });
}

}  // namespace shardpoint
