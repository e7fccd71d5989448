#include "src/source/hf_dir.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>

#include "src/base/bytes.h"
#include "src/format/safetensors.h"
#include "src/io/path.h"

using shardpoint::internal_base::ByteReader;
using shardpoint::internal_base::ByteWriter;
using shardpoint::internal_format::DecodeSafetensorsHeader;
using shardpoint::internal_format::DecodeSafetensorsHeaderLength;
using shardpoint::internal_format::SafetensorsEntry;
using shardpoint::internal_format::SafetensorsHeader;
using shardpoint::internal_hf::kHfIndexName;
using shardpoint::internal_io::JoinPath;

namespace shardpoint::internal_source {
namespace {

using Json = nlohmann::json;

bool EndsWith(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool SafeName(const std::string& f) {
  return !f.empty() && f.find('/') == std::string::npos && f != "." && f != "..";
}

// "<stem>-<digits>-of-<digits>.safetensors", as transformers names shards.
bool AllDigits(std::string_view s) {
  return !s.empty() && s.find_first_not_of("0123456789") == std::string_view::npos;
}

bool IsShardName(const std::string& f) {
  constexpr std::string_view kExt = ".safetensors";
  if (!EndsWith(f, kExt)) return false;
  std::string_view s(f);
  s.remove_suffix(kExt.size());
  const size_t of = s.rfind("-of-");
  if (of == std::string_view::npos || !AllDigits(s.substr(of + 4))) return false;
  const std::string_view head = s.substr(0, of);
  const size_t dash = head.rfind('-');
  return dash != std::string_view::npos && dash > 0 && AllDigits(head.substr(dash + 1));
}

// The data files, and the weight_map of the index (empty without an index).
Status ListFiles(Storage* storage, const std::string& dir, std::vector<std::string>* files,
                 std::string* index_json) {
  const std::string index_path = JoinPath(dir, kHfIndexName);
  SP_ASSIGN_OR_RETURN(bool has_index, storage->Exists(index_path));
  if (has_index) {
    SP_ASSIGN_OR_RETURN(*index_json, storage->ReadFileToString(index_path));
    Json j = Json::parse(*index_json, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object() || !j.contains("weight_map") ||
        !j["weight_map"].is_object()) {
      return DataLossError("'" + index_path + "': not JSON with a \"weight_map\" object");
    }
    std::set<std::string> names;
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
      if (!it.value().is_string() || !SafeName(it.value().get<std::string>())) {
        return DataLossError("'" + index_path + "': tensor '" + it.key() +
                             "' maps to an invalid file name " + it.value().dump());
      }
      names.insert(it.value().get<std::string>());
    }
    files->assign(names.begin(), names.end());
    return OkStatus();
  }
  SP_ASSIGN_OR_RETURN(std::vector<std::string> all, storage->ListDir(dir));
  for (const std::string& f : all) {
    if (EndsWith(f, ".safetensors")) files->push_back(f);
  }
  if (files->empty()) return NotFoundError("'" + dir + "' holds no .safetensors file");
  // Shards named "<stem>-0000i-of-0000N" belong to an index: without it they
  // are an unfinished export or download (the index is written last), never
  // a model to read as it is.
  for (const std::string& f : *files) {
    if (IsShardName(f)) {
      return FailedPreconditionError(
          "HF model '" + dir + "': '" + f + "' is one shard of a sharded model, but '" +
          index_path +
          "' does not exist (an unfinished export or download?); refusing to read the shards "
          "without their index");
    }
  }
  return OkStatus();
}

}  // namespace

Result<std::string> ReadHfHeaders(Storage* storage, const std::string& dir) {
  std::vector<std::string> files;
  std::string index_json;
  SP_RETURN_IF_ERROR(ListFiles(storage, dir, &files, &index_json));
  ByteWriter w;
  w.U32(static_cast<uint32_t>(files.size()));
  for (const std::string& f : files) {
    const std::string path = JoinPath(dir, f);
    SP_ASSIGN_OR_RETURN(std::unique_ptr<ReadableFile> file, storage->NewReadableFile(path));
    SP_ASSIGN_OR_RETURN(uint64_t size, file->Size());
    char first8[8] = {};
    if (size >= 8) SP_RETURN_IF_ERROR(file->ReadAt(0, 8, first8));
    SP_ASSIGN_OR_RETURN(uint64_t n, DecodeSafetensorsHeaderLength(
                                        std::string_view(first8, size >= 8 ? 8 : 0), size, path));
    std::string json(n, '\0');
    SP_RETURN_IF_ERROR(file->ReadAt(8, n, json.data()));
    w.Str(f);
    w.U64(size);
    w.Blob(json);
  }
  w.Blob(index_json);
  std::string config;
  SP_ASSIGN_OR_RETURN(bool has_config, storage->Exists(JoinPath(dir, "config.json")));
  if (has_config) {
    SP_ASSIGN_OR_RETURN(config, storage->ReadFileToString(JoinPath(dir, "config.json")));
  }
  w.Blob(config);
  SP_RETURN_IF_ERROR(w.status().WithContext("HF headers of '" + dir + "'"));
  return std::move(w.str());
}

Result<HfDirIndex> DecodeHfHeaders(std::string_view blob, const std::string& dir) {
  ByteReader r(blob, "HF headers of '" + dir + "'");
  HfDirIndex idx;
  uint32_t n = 0;
  SP_RETURN_IF_ERROR(r.U32(&n));
  std::set<std::string> seen;
  for (uint32_t i = 0; i < n; ++i) {
    std::string name, json;
    uint64_t size = 0;
    SP_RETURN_IF_ERROR(r.Str(&name));
    SP_RETURN_IF_ERROR(r.U64(&size));
    SP_RETURN_IF_ERROR(r.Blob(&json));
    const std::string path = JoinPath(dir, name);
    SP_ASSIGN_OR_RETURN(SafetensorsHeader h, DecodeSafetensorsHeader(json, size, path));
    for (const SafetensorsEntry& e : h.entries) {
      if (!seen.insert(e.name).second) {
        return DataLossError("HF model '" + dir + "': tensor '" + e.name + "' is in two files");
      }
      idx.tensors.push_back(
          {{e.name, e.dtype, e.shape}, i, h.data_start + e.begin, e.end - e.begin});
    }
    idx.files.push_back(name);
  }
  std::string index_json;
  SP_RETURN_IF_ERROR(r.Blob(&index_json));
  SP_RETURN_IF_ERROR(r.Blob(&idx.config_json));
  std::sort(idx.tensors.begin(), idx.tensors.end(),
            [](const auto& a, const auto& b) { return a.meta.name < b.meta.name; });
  if (!index_json.empty()) {
    Json j = Json::parse(index_json, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object() || !j.contains("weight_map") ||
        !j["weight_map"].is_object()) {
      return DataLossError("HF model '" + dir + "': bad " + kHfIndexName);
    }
    const Json& wm = j["weight_map"];
    if (wm.size() != idx.tensors.size()) {
      return DataLossError("HF model '" + dir + "': the index lists " + std::to_string(wm.size()) +
                           " tensors, the files hold " + std::to_string(idx.tensors.size()));
    }
    for (const auto& t : idx.tensors) {
      auto it = wm.find(t.meta.name);
      if (it == wm.end() || !it->is_string() || it->get<std::string>() != idx.files[t.file]) {
        return DataLossError("HF model '" + dir + "': tensor '" + t.meta.name + "' is in '" +
                             idx.files[t.file] + "', which the index does not say");
      }
    }
  }
  return idx;
}

Result<HfDirIndex> ScanHfDir(Storage* storage, const std::string& dir) {
  SP_ASSIGN_OR_RETURN(std::string blob, ReadHfHeaders(storage, dir));
  return DecodeHfHeaders(blob, dir);
}

}  // namespace shardpoint::internal_source
