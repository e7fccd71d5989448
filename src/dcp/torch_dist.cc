#include "src/dcp/torch_dist.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "src/dcp/pickle.h"
#include "src/dcp/zip.h"

namespace shardpoint::internal_dcp {
namespace {

using Json = nlohmann::ordered_json;
constexpr int kMaxDepth = 64;
// Values rendered at most: shared references (a memo entry used twice at
// every level) would otherwise render exponentially many.
constexpr size_t kMaxRendered = size_t{1} << 20;

class Renderer {
 public:
  explicit Renderer(const PickleTree& t) : t_(t) {}

  Json Render(uint32_t v, int depth) const {
    if (v == kNoValue) return nullptr;
    if (depth > kMaxDepth) return "<nested too deep>";
    if (++rendered_ > kMaxRendered) return "<truncated>";
    const PyValue& x = t_.at(v);
    switch (x.kind) {
      case PyKind::kNone:
        return nullptr;
      case PyKind::kBool:
        return x.i != 0;
      case PyKind::kInt:
        return x.i;
      case PyKind::kFloat:
        if (std::isfinite(x.f)) return x.f;
        return std::isnan(x.f) ? "nan" : (x.f > 0 ? "inf" : "-inf");
      case PyKind::kStr:
        return x.text;
      case PyKind::kBytes:
        return Json{{"__bytes__", x.text.size()}};
      case PyKind::kTuple:
      case PyKind::kList: {
        Json a = Json::array();
        for (uint32_t i : x.items) a.push_back(Render(i, depth + 1));
        return a;
      }
      case PyKind::kDict:
        return Dict(x.items, depth);
      case PyKind::kGlobal:
        return Json{{"__class__", x.text}};
      case PyKind::kPersId:
        return Json{{"__storage__", Render(x.args, depth + 1)}};
      case PyKind::kCall:
        return Call(x, depth);
    }
    return nullptr;
  }

 private:
  Json Dict(const std::vector<uint32_t>& items, int depth) const {
    Json o = Json::object();
    for (size_t i = 0; i + 1 < items.size(); i += 2) {
      const PyValue& k = t_.at(items[i]);
      std::string key = k.kind == PyKind::kStr   ? k.text
                        : k.kind == PyKind::kInt ? std::to_string(k.i)
                                                 : Describe(t_, items[i]);
      o[key] = Render(items[i + 1], depth + 1);
    }
    return o;
  }

  Json Call(const PyValue& x, int depth) const {
    const std::string& name = t_.at(x.callable).text;
    if (name == "collections.OrderedDict") return Dict(x.items, depth);
    const std::vector<uint32_t>* args = x.args != kNoValue ? &t_.at(x.args).items : nullptr;
    if (name == "torch._utils._rebuild_tensor_v2" && args && args->size() >= 3) {
      const PyValue& pid = t_.at((*args)[0]);
      Json j{{"__tensor__", "?"}, {"size", Render((*args)[2], depth + 1)}};
      if (pid.kind == PyKind::kPersId && pid.args != kNoValue &&
          t_.at(pid.args).items.size() >= 2) {
        j["__tensor__"] = Describe(t_, t_.at(pid.args).items[1]);
      }
      return j;
    }
    Json j{{"__class__", name}};
    if (args && !args->empty()) j["args"] = Render(x.args, depth + 1);
    if (x.state != kNoValue) j["state"] = Render(x.state, depth + 1);
    if (!x.items.empty()) j["items"] = Dict(x.items, depth);
    return j;
  }

  const PickleTree& t_;
  mutable size_t rendered_ = 0;
};

Status Bad(const std::string& what, const std::string& m) {
  return DataLossError("'" + what + "': " + m);
}

}  // namespace

Result<std::string> CommonPtToJson(std::string_view bytes, const std::string& what) {
  ZipReadAt read = [bytes](uint64_t offset, size_t n, char* dst) -> Status {
    std::copy_n(bytes.data() + offset, n, dst);
    return OkStatus();
  };
  SP_ASSIGN_OR_RETURN(std::vector<ZipEntry> entries, ReadZipDirectory(bytes.size(), read, what));
  const ZipEntry* pkl = nullptr;
  for (const ZipEntry& e : entries) {
    const size_t slash = e.name.find('/');
    if (slash != std::string::npos && e.name.compare(slash, std::string::npos, "/data.pkl") == 0) {
      pkl = &e;
    }
  }
  if (!pkl) return Bad(what, "no <name>/data.pkl entry (not a torch.save file)");
  // Any class is recorded by name: the reader never imports nor calls.
  SP_ASSIGN_OR_RETURN(PickleTree t,
                      ParsePickle(
                          bytes.substr(pkl->data_offset, pkl->size),
                          [](std::string_view, std::string_view) { return true; }, what));
  return Renderer(t).Render(t.root, 0).dump(-1, ' ', false, Json::error_handler_t::replace);
}

Result<std::optional<TorchDistInfo>> ReadTorchDist(Storage* storage, const std::string& dir) {
  const std::string config = dir + "/" + kTorchDistConfigName;
  SP_ASSIGN_OR_RETURN(bool has_config, storage->Exists(config));
  if (!has_config) return std::optional<TorchDistInfo>();
  TorchDistInfo info;
  SP_ASSIGN_OR_RETURN(info.config_json, storage->ReadFileToString(config));
  Json c = Json::parse(info.config_json, nullptr, false);
  if (c.is_discarded() || !c.is_object()) return Bad(config, "is not a JSON object");
  auto backend = c.find("sharded_backend");
  if (backend == c.end() || !backend->is_string()) {
    return std::optional<TorchDistInfo>();  // not Megatron's: an unrelated metadata.json
  }
  if (*backend != "torch_dist") {
    return FailedPreconditionError("'" + config + "': sharded_backend '" +
                                   backend->get<std::string>() +
                                   "' (only Megatron's torch_dist is read)");
  }
  const std::string common = dir + "/" + kTorchDistCommonName;
  SP_ASSIGN_OR_RETURN(bool has_common, storage->Exists(common));
  if (has_common) {
    SP_ASSIGN_OR_RETURN(std::unique_ptr<ReadableFile> f, storage->NewReadableFile(common));
    SP_ASSIGN_OR_RETURN(uint64_t size, f->Size());
    if (size > kMaxCommonPtBytes) {
      return FailedPreconditionError("'" + common + "' of " + std::to_string(size) +
                                     " bytes (at most " + std::to_string(kMaxCommonPtBytes) +
                                     " are read)");
    }
    info.common_bytes.resize(size);
    if (size) SP_RETURN_IF_ERROR(f->ReadAt(0, size, info.common_bytes.data()));
    SP_ASSIGN_OR_RETURN(info.common_json, CommonPtToJson(info.common_bytes, common));
    info.has_common = true;
  }
  return std::optional<TorchDistInfo>(std::move(info));
}

}  // namespace shardpoint::internal_dcp
