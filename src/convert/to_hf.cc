// ExportHf: a checkpoint (or HF model) -> an HF safetensors model.
#include <chrono>
#include <nlohmann/json.hpp>

#include "shardpoint/hf.h"
#include "src/convert/convert_source.h"
#include "src/convert/stream.h"
#include "src/hf/hf_files.h"
#include "src/io/path.h"
#include "src/io/staged_output.h"
#include "src/source/mapped_source.h"

using shardpoint::internal_convert::IsFloatDType;
using shardpoint::internal_convert::OutPiece;
using shardpoint::internal_convert::OutTensor;
using shardpoint::internal_convert::RunConversion;
using shardpoint::internal_convert::StreamOptions;
using shardpoint::internal_convert::StreamPool;
using shardpoint::internal_convert::StreamTensors;
using shardpoint::internal_format::SafetensorsEntry;
using shardpoint::internal_format::TensorRecord;
using shardpoint::internal_hf::HfFilePlan;
using shardpoint::internal_hf::HfMeta;
using shardpoint::internal_hf::HfModelPlan;
using shardpoint::internal_hf::HfPiece;
using shardpoint::internal_hf::kHfIndexName;
using shardpoint::internal_hf::MapKeysToHf;
using shardpoint::internal_hf::MappedKey;
using shardpoint::internal_hf::NaturalLess;
using shardpoint::internal_hf::PlanHfModel;
using shardpoint::internal_hf::ResolveVars;
using shardpoint::internal_hf::Vars;
using shardpoint::internal_io::CallResources;
using shardpoint::internal_io::JoinPath;
using shardpoint::internal_io::StagedOutput;
using shardpoint::internal_source::MappedSource;
using shardpoint::internal_source::OpenSource;

namespace shardpoint {

namespace internal_convert {
namespace {

// An HF tensor of the output and the pieces of source keys it is made of.
struct HfOut {
  HfMeta meta;
  std::vector<OutPiece> pieces;
};

// Keys -> HF tensors and their pieces, in the natural order of their names.
Result<std::vector<HfOut>> MapToHfTensors(const MappedSource& src, const HfMapping& mapping,
                                          const ExportHfOptions& options, const Vars& vars) {
  std::vector<HfMeta> keys;
  for (const TensorRecord& t : src.index.tensors) {
    DType d = options.dtype && IsFloatDType(t.dtype) ? *options.dtype : t.dtype;
    keys.push_back({t.key, d, t.shape});
  }
  SP_ASSIGN_OR_RETURN(std::vector<MappedKey> mapped, MapKeysToHf(mapping, keys, vars));
  std::map<std::string, HfOut> outs;
  for (const MappedKey& mk : mapped) {
    for (const HfMeta& h : mk.hf_tensors) outs[h.name].meta = h;
    for (const HfPiece& p : mk.pieces)
      outs[p.hf].pieces.push_back({mk.info.key, p.box, p.hf_offset});
  }
  std::vector<HfOut> order;
  for (auto& [name, o] : outs) order.push_back(std::move(o));
  std::sort(order.begin(), order.end(),
            [](const HfOut& a, const HfOut& b) { return NaturalLess(a.meta.name, b.meta.name); });
  return order;
}

}  // namespace

Result<ExportHfStats> ExportSourceToHf(const MappedSource& src, const std::string& out_dir,
                                       const HfMapping& mapping, const ExportHfOptions& options,
                                       CallResources& res,
                                       std::chrono::steady_clock::time_point start) {
  Storage* storage = res.storage();
  SP_ASSIGN_OR_RETURN(Vars vars,
                      ResolveVars(mapping, src.config_json, options.variables, src.source_vars));

  SP_ASSIGN_OR_RETURN(std::vector<HfOut> order, MapToHfTensors(src, mapping, options, vars));
  std::vector<HfMeta> metas;
  for (const HfOut& o : order) metas.push_back(o.meta);
  HfModelPlan plan = PlanHfModel(metas, options.max_shard_size, {{"format", "pt"}});

  // Files, headers, then the data, all in "<out>.partial", renamed to
  // <out> once durable: no reader ever sees the shards of an unfinished
  // export, or a mix of two.
  SP_ASSIGN_OR_RETURN(StagedOutput out,
                      StagedOutput::Begin(storage, out_dir, options.overwrite, "export-hf"));
  std::vector<std::unique_ptr<WritableFile>> files;
  std::vector<WritableFile*> raw;
  for (const HfFilePlan& f : plan.files) {
    SP_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> w,
                        storage->NewWritableFile(JoinPath(out.dir(), f.name), {}));
    SP_RETURN_IF_ERROR(w->WriteAt(0, f.header.data(), f.header.size()));
    SP_RETURN_IF_ERROR(w->Truncate(f.header.size() + f.data_bytes));
    raw.push_back(w.get());
    files.push_back(std::move(w));
  }
  std::vector<OutTensor> tensors;
  ExportHfStats stats;
  for (size_t i = 0; i < order.size(); ++i) {
    const auto [file, entry] = plan.where[i];
    const SafetensorsEntry& e = plan.files[file].entries[entry];
    OutTensor t;
    t.name = order[i].meta.name;
    t.dtype = e.dtype;
    t.numel = static_cast<int64_t>((e.end - e.begin) / DTypeSize(e.dtype));
    t.file = file;
    t.offset = plan.files[file].header.size() + e.begin;
    t.pieces = std::move(order[i].pieces);
    stats.bytes += e.end - e.begin;
    tensors.push_back(std::move(t));
  }
  SP_RETURN_IF_ERROR(StreamTensors(
      src, storage, raw, tensors,
      StreamOptions{StreamPool(res), options.block_bytes, false, options.progress}, nullptr));
  for (auto& f : files) {
    SP_RETURN_IF_ERROR(f->Sync());
    SP_RETURN_IF_ERROR(f->Close());
  }
  if (!plan.index_json.empty()) {
    SP_RETURN_IF_ERROR(
        storage->WriteStringToFile(JoinPath(out.dir(), kHfIndexName), plan.index_json));
  }
  if (!src.config_json.empty()) {
    SP_RETURN_IF_ERROR(
        storage->WriteStringToFile(JoinPath(out.dir(), "config.json"), src.config_json));
  }
  SP_RETURN_IF_ERROR(out.Commit());
  if (!out.cleanup_error().empty()) res.Log("shardpoint: " + out.cleanup_error());
  stats.source_kind = src.checkpoint_kind;
  stats.files = static_cast<int>(plan.files.size());
  stats.tensors = static_cast<int64_t>(tensors.size());
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return stats;
}

}  // namespace internal_convert

Result<ExportHfStats> ExportHf(const std::string& ckpt_dir, const std::string& out_dir,
                               const HfMapping& mapping, const ExportHfOptions& options) {
  return RunConversion(
      "export-hf", ckpt_dir, out_dir, options, [&](CallResources& res) -> Result<ExportHfStats> {
        const auto start = std::chrono::steady_clock::now();
        SP_ASSIGN_OR_RETURN(MappedSource src,
                            OpenSource(res.storage(), ckpt_dir, mapping, options.variables));
        return internal_convert::ExportSourceToHf(src, out_dir, mapping, options, res, start);
      });
}

}  // namespace shardpoint
