#include "src/source/mapped_source.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <optional>

#include "shardpoint/checkpoint_kind.h"
#include "src/hf/megatron_vars.h"
#include "src/source/manifest_read.h"
#include "src/source/manifest_shards.h"
#include "src/source/open_source.h"

using shardpoint::internal_format::ChunkRecord;
using shardpoint::internal_format::Manifest;
using shardpoint::internal_format::TensorRecord;
using shardpoint::internal_hf::HfMeta;
using shardpoint::internal_hf::HfPiece;
using shardpoint::internal_hf::MapHfToKeys;
using shardpoint::internal_hf::MappedKey;
using shardpoint::internal_hf::MegatronArgsVars;
using shardpoint::internal_hf::ResolveVars;
using shardpoint::internal_hf::Vars;

namespace shardpoint::internal_source {

Manifest BuildHfManifest(const HfDirIndex& idx, const std::vector<MappedKey>& mapped) {
  Manifest m;
  m.files = idx.files;
  for (const MappedKey& mk : mapped) {
    TensorRecord t;
    t.key = mk.info.key;
    t.dtype = mk.info.dtype;
    t.shape = mk.info.shape;
    const uint64_t es = DTypeSize(t.dtype);
    for (const HfPiece& p : mk.pieces) {
      auto it = std::lower_bound(
          idx.tensors.begin(), idx.tensors.end(), p.hf,
          [](const HfDirIndex::Tensor& x, const std::string& n) { return x.meta.name < n; });
      ChunkRecord c;
      c.box = p.box;
      c.file = it->file;
      c.offset = it->offset + static_cast<uint64_t>(p.hf_offset) * es;
      c.nbytes = static_cast<uint64_t>(p.box.num_elements()) * es;
      t.chunks.push_back(std::move(c));
    }
    std::sort(t.chunks.begin(), t.chunks.end(),
              [](const ChunkRecord& a, const ChunkRecord& b) { return a.box < b.box; });
    m.tensors.push_back(std::move(t));
  }
  return m;
}

namespace {

Result<MappedSource> SourceFromHfIndex(HfDirIndex idx, const std::string& dir,
                                       const HfMapping& mapping, const Vars& explicit_vars,
                                       const Vars& source_vars = {}) {
  MappedSource s;
  s.dir = dir;
  s.checkpoint_kind = CheckpointKind::kHfModel;
  s.kind = "HF model";
  s.name = "HF model '" + dir + "' (mapping '" + mapping.name + "')";
  s.has_checksums = false;
  s.has_objects = false;
  s.hf = true;
  s.config_json = idx.config_json;
  SP_ASSIGN_OR_RETURN(Vars vars, ResolveVars(mapping, idx.config_json, explicit_vars, source_vars));
  std::vector<HfMeta> metas;
  metas.reserve(idx.tensors.size());
  for (const auto& t : idx.tensors) metas.push_back(t.meta);
  Result<std::vector<MappedKey>> mapped = MapHfToKeys(mapping, metas, vars);
  if (!mapped.ok()) return mapped.status().WithContext("HF model '" + dir + "'");
  s.mapped = std::move(*mapped);
  s.index = BuildHfManifest(idx, s.mapped);
  return s;
}

}  // namespace

std::string ConfigFromMetadata(const std::string& metadata_json) {
  if (metadata_json.empty()) return "";
  nlohmann::json j = nlohmann::json::parse(metadata_json, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("hf") || !j["hf"].is_object() ||
      !j["hf"].contains("config") || !j["hf"]["config"].is_object()) {
    return "";
  }
  return j["hf"]["config"].dump(2);
}

Result<MappedSource> OpenSource(Storage* storage, const std::string& dir, const HfMapping& mapping,
                                const Vars& explicit_vars, const Vars& source_vars) {
  SP_ASSIGN_OR_RETURN(std::optional<std::string> top, ManifestReadWhole(storage, dir));
  if (top) {  // an object store: the manifest in one GET, no kind detection's HEAD
    MappedSource s;
    static_cast<Source&>(s) = EmptySource(dir, false);
    SP_ASSIGN_OR_RETURN(s.index, WholeManifest(storage, dir, *top));
    s.config_json = ConfigFromMetadata(s.index.metadata_json);
    return s;
  }
  SP_ASSIGN_OR_RETURN(CheckpointKind kind, DetectCheckpointKind(dir, storage));
  return OpenSource(storage, dir, kind, mapping, explicit_vars, source_vars);
}

Result<MappedSource> OpenSource(Storage* storage, const std::string& dir, CheckpointKind kind,
                                const HfMapping& mapping, const Vars& explicit_vars,
                                const Vars& source_vars) {
  if (kind == CheckpointKind::kHfModel) {
    SP_ASSIGN_OR_RETURN(HfDirIndex idx, ScanHfDir(storage, dir));
    return SourceFromHfIndex(std::move(idx), dir, mapping, explicit_vars, source_vars);
  }
  MappedSource s;
  SP_ASSIGN_OR_RETURN(static_cast<Source&>(s), OpenCheckpointSource(storage, dir, kind));
  if (kind == CheckpointKind::kPyTorchDcp) {
    s.source_vars = MegatronArgsVars(s.index.metadata_json);
  } else {
    s.config_json = ConfigFromMetadata(s.index.metadata_json);
  }
  return s;
}

Result<std::string> ReadHfSourceBytes(Storage* storage, const std::string& dir) {
  return ReadHfHeaders(storage, dir);
}

Result<MappedSource> DecodeHfSource(std::string_view bytes, const std::string& dir,
                                    const HfMapping& mapping, const Vars& explicit_vars) {
  SP_ASSIGN_OR_RETURN(HfDirIndex idx, DecodeHfHeaders(bytes, dir));
  return SourceFromHfIndex(std::move(idx), dir, mapping, explicit_vars);
}

}  // namespace shardpoint::internal_source
