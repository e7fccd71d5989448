#include "src/dcp/metadata.h"

#include <algorithm>
#include <array>

#include "src/base/limits.h"
#include "src/dcp/pickle.h"

using shardpoint::internal_base::kMaxRank;

namespace shardpoint::internal_dcp {
namespace {

constexpr std::string_view kOld = kDcpTorch1.metadata;
constexpr std::string_view kNew = kDcpTorch2.metadata;
constexpr std::string_view kShard = kDcpTorch1.properties;

struct TorchDType {
  std::string_view name;
  DType dtype;
};
constexpr std::array<TorchDType, 22> kTorchDTypes{{
    {"float32", DType::kF32},
    {"float", DType::kF32},
    {"float64", DType::kF64},
    {"double", DType::kF64},
    {"float16", DType::kF16},
    {"half", DType::kF16},
    {"bfloat16", DType::kBF16},
    {"uint8", DType::kU8},
    {"int8", DType::kI8},
    {"int16", DType::kI16},
    {"short", DType::kI16},
    {"int32", DType::kI32},
    {"int", DType::kI32},
    {"int64", DType::kI64},
    {"long", DType::kI64},
    {"bool", DType::kBool},
    {"uint16", DType::kU16},
    {"uint32", DType::kU32},
    {"uint64", DType::kU64},
    {"float8_e4m3fn", DType::kF8E4M3},
    {"float8_e5m2", DType::kF8E5M2},
    {"float8_e4m3fnuz", DType::kF8E4M3},
}};

class Walker {
 public:
  Walker(const PickleTree& t, const std::string& what) : t_(t), what_(what) {}

  Status Bad(const std::string& m) const {
    return DataLossError("'" + what_ + "': DCP metadata " + m);
  }
  // The class name of object `v` if it is one of `names` in a DCP module.
  Result<std::string> Object(uint32_t v, std::initializer_list<std::string_view> names,
                             const std::string& where) const {
    const PyValue& x = t_.at(v);
    if (x.kind == PyKind::kCall) {
      const std::string& c = t_.at(x.callable).text;
      for (std::string_view n : names) {
        for (std::string_view mod : {kOld, kNew, kShard}) {
          if (c.size() == mod.size() + 1 + n.size() && c.compare(0, mod.size(), mod) == 0 &&
              c.compare(mod.size() + 1, std::string::npos, n) == 0) {
            return std::string(n);
          }
        }
        if (n == "_StorageInfo" && c.size() > n.size() && c.ends_with(".filesystem._StorageInfo")) {
          return std::string(n);
        }
      }
    }
    std::string want;
    for (std::string_view n : names) want += (want.empty() ? "" : " or ") + std::string(n);
    return Bad(where + " is " + Describe(t_, v) + ", not " + want);
  }
  // A field of a dataclass object (its BUILD state dict).
  Result<uint32_t> Field(uint32_t obj, std::string_view name, const std::string& where,
                         bool optional = false) const {
    const uint32_t f = DictGet(t_, t_.at(obj).state, name);
    if (f == kNoValue && !optional) return Bad(where + " has no field '" + std::string(name) + "'");
    return f;
  }
  Result<std::string> Str(uint32_t v, const std::string& where) const {
    if (v == kNoValue || t_.at(v).kind != PyKind::kStr) return Bad(where + " is not a str");
    return t_.at(v).text;
  }
  Result<int64_t> Int(uint32_t v, const std::string& where) const {
    if (v == kNoValue || t_.at(v).kind != PyKind::kInt) return Bad(where + " is not an int");
    return t_.at(v).i;
  }
  // torch.Size(tuple) or a plain tuple of non-negative ints.
  Result<Shape> Size(uint32_t v, const std::string& where) const {
    if (v == kNoValue) return Bad(where + " is missing");
    const PyValue* x = &t_.at(v);
    if (x->kind == PyKind::kCall) {
      if (t_.at(x->callable).text != "torch.Size" || t_.at(x->args).items.size() != 1) {
        return Bad(where + " is " + Describe(t_, v) + ", not a torch.Size");
      }
      x = &t_.at(t_.at(x->args).items[0]);
    }
    if (x->kind != PyKind::kTuple && x->kind != PyKind::kList) {
      return Bad(where + " is not a torch.Size");
    }
    if (x->items.size() > kMaxRank) return Bad(where + " has rank > 32");
    Shape s;
    for (uint32_t i : x->items) {
      const PyValue& e = t_.at(i);
      if (e.kind != PyKind::kInt || e.i < 0) return Bad(where + " holds " + Describe(t_, i));
      s.push_back(e.i);
    }
    return s;
  }
  Result<DType> DTypeOf(uint32_t props, const std::string& where) const {
    SP_RETURN_IF_ERROR(Object(props, {"TensorProperties"}, where).status());
    uint32_t state = t_.at(props).state;
    uint32_t d = kNoValue;
    if (state != kNoValue && t_.at(state).kind == PyKind::kTuple && !t_.at(state).items.empty()) {
      d = t_.at(state)
              .items[0];  // __getstate__: (dtype, layout, requires_grad, memory_format, pin)
    } else {
      d = DictGet(t_, state, "dtype");
    }
    if (d == kNoValue || t_.at(d).kind != PyKind::kGlobal) return Bad(where + " has no dtype");
    Result<DType> dt = DTypeFromTorchName(t_.at(d).text);
    if (!dt.ok()) return dt.status().WithContext("'" + what_ + "': " + where);
    return dt;
  }

 private:
  const PickleTree& t_;
  const std::string& what_;
};

// Megatron-Core's `mcore_data` field, if any: {fqn: {"nd_reformulated_orig_global_shape":
// (X, Y, ...)}} for every N-D flattened tensor (other entries are ignored).
Status DecodeMCoreData(const PickleTree& t, const Walker& w, uint32_t root, DcpMetadata* md) {
  SP_ASSIGN_OR_RETURN(uint32_t mc, w.Field(root, "mcore_data", "Metadata", true));
  if (mc == kNoValue || t.at(mc).kind == PyKind::kNone) return OkStatus();
  if (t.at(mc).kind != PyKind::kDict) return w.Bad("mcore_data is not a dict");
  const std::vector<uint32_t>& items = t.at(mc).items;
  for (size_t i = 0; i + 1 < items.size(); i += 2) {
    SP_ASSIGN_OR_RETURN(std::string fqn, w.Str(items[i], "an mcore_data key"));
    const std::string where = "mcore_data entry '" + fqn + "'";
    if (t.at(items[i + 1]).kind != PyKind::kDict) return w.Bad(where + " is not a dict");
    const uint32_t shape = DictGet(t, items[i + 1], "nd_reformulated_orig_global_shape");
    if (shape == kNoValue || t.at(shape).kind == PyKind::kNone) continue;
    SP_ASSIGN_OR_RETURN(md->nd_flattened[fqn], w.Size(shape, where + " original shape"));
  }
  return OkStatus();
}

}  // namespace

bool IsTorchDType(std::string_view name) {
  return std::any_of(kTorchDTypes.begin(), kTorchDTypes.end(),
                     [&](const TorchDType& d) { return d.name == name; });
}

bool DcpMetadataClassAllowed(std::string_view module, std::string_view name) {
  if (module == kOld || module == kNew) {
    for (std::string_view n :
         {"Metadata", "MetadataIndex", "TensorStorageMetadata", "ChunkStorageMetadata",
          "BytesStorageMetadata", "TensorProperties", "StorageMeta", "_MEM_FORMAT_ENCODING"}) {
      if (name == n) return true;
    }
    return false;
  }
  if (module == kShard) {
    return name == "TensorProperties" || name == "MEM_FORMAT_ENCODING";
  }
  if (module == kDcpTorch1.filesystem || module == kDcpTorch2.filesystem) {
    return name == "_StorageInfo";
  }
  if (module == kMCoreMetadataModule) return name == "MCoreMetadata";
  if (module == "torch") return name == "Size" || IsTorchDType(name);
  if (module == "torch.serialization") return name == "_get_layout";
  if (module == "builtins") return name == "getattr";  // enum members by name; recorded, not run
  if (module == "collections") return name == "OrderedDict";
  if (module == "pathlib") return name == "PosixPath" || name == "PurePosixPath";
  return false;
}

Result<DType> DTypeFromTorchName(std::string_view full_name) {
  if (full_name.starts_with("torch.")) {
    std::string_view n = full_name.substr(6);
    for (const TorchDType& d : kTorchDTypes) {
      if (d.name == n) {
        if (n == "float8_e4m3fnuz") break;  // a different encoding than E4M3FN
        return d.dtype;
      }
    }
  }
  return FailedPreconditionError("dtype '" + std::string(full_name) +
                                 "' has no shardpoint equivalent");
}

Result<DcpMetadata> DecodeDcpMetadata(std::string_view bytes, const std::string& what) {
  SP_ASSIGN_OR_RETURN(PickleTree t, ParsePickle(bytes, DcpMetadataClassAllowed, what));
  Walker w(t, what);
  DcpMetadata md;
  const uint32_t root = t.root;
  const bool mcore =
      t.at(root).kind == PyKind::kCall &&
      t.at(t.at(root).callable).text == std::string(kMCoreMetadataModule) + ".MCoreMetadata";
  if (!mcore) SP_RETURN_IF_ERROR(w.Object(root, {"Metadata"}, "the root").status());
  md.torch_major = t.at(t.at(root).callable).text.starts_with(kOld) ? 1 : 2;
  SP_ASSIGN_OR_RETURN(uint32_t sdm, w.Field(root, "state_dict_metadata", "Metadata"));
  if (t.at(sdm).kind != PyKind::kDict) return w.Bad("state_dict_metadata is not a dict");
  const std::vector<uint32_t>& items = t.at(sdm).items;
  for (size_t i = 0; i + 1 < items.size(); i += 2) {
    SP_ASSIGN_OR_RETURN(std::string fqn, w.Str(items[i], "a state_dict_metadata key"));
    const std::string where = "entry '" + fqn + "'";
    SP_ASSIGN_OR_RETURN(
        std::string kind,
        w.Object(items[i + 1], {"TensorStorageMetadata", "BytesStorageMetadata"}, where));
    if (kind == "BytesStorageMetadata") {
      md.bytes.push_back(fqn);
      continue;
    }
    const uint32_t v = items[i + 1];
    DcpTensorMeta tm;
    tm.fqn = fqn;
    SP_ASSIGN_OR_RETURN(uint32_t props, w.Field(v, "properties", where));
    SP_ASSIGN_OR_RETURN(tm.dtype, w.DTypeOf(props, where + " properties"));
    SP_ASSIGN_OR_RETURN(uint32_t size, w.Field(v, "size", where));
    SP_ASSIGN_OR_RETURN(tm.shape, w.Size(size, where + " size"));
    Result<int64_t> n = CheckedNumElements(tm.shape);
    if (!n.ok() || static_cast<uint64_t>(*n) > (UINT64_MAX >> 3)) {
      return w.Bad(where + " size " + ShapeToString(tm.shape) + " overflows");
    }
    SP_ASSIGN_OR_RETURN(uint32_t chunks, w.Field(v, "chunks", where));
    if (t.at(chunks).kind != PyKind::kList) return w.Bad(where + " chunks are not a list");
    for (uint32_t c : t.at(chunks).items) {
      const std::string cw = where + " chunk " + std::to_string(tm.chunks.size());
      SP_RETURN_IF_ERROR(w.Object(c, {"ChunkStorageMetadata"}, cw).status());
      SP_ASSIGN_OR_RETURN(uint32_t off, w.Field(c, "offsets", cw));
      SP_ASSIGN_OR_RETURN(uint32_t sz, w.Field(c, "sizes", cw));
      Box b;
      SP_ASSIGN_OR_RETURN(b.offset, w.Size(off, cw + " offsets"));
      SP_ASSIGN_OR_RETURN(b.shape, w.Size(sz, cw + " sizes"));
      Status s = ValidateBoxInShape(b, tm.shape);
      if (!s.ok()) {
        return w.Bad(cw + " " + b.ToString() + " is not inside " + ShapeToString(tm.shape));
      }
      tm.chunks.push_back(std::move(b));
    }
    md.tensors.push_back(std::move(tm));
  }
  std::sort(md.tensors.begin(), md.tensors.end(),
            [](const DcpTensorMeta& a, const DcpTensorMeta& b) { return a.fqn < b.fqn; });
  std::sort(md.bytes.begin(), md.bytes.end());
  for (size_t i = 1; i < md.tensors.size(); ++i) {
    if (md.tensors[i].fqn == md.tensors[i - 1].fqn)
      return w.Bad("names '" + md.tensors[i].fqn + "' twice");
  }
  for (size_t i = 1; i < md.bytes.size(); ++i) {
    if (md.bytes[i] == md.bytes[i - 1]) return w.Bad("names '" + md.bytes[i] + "' twice");
  }

  // storage_data: {MetadataIndex: _StorageInfo}.
  SP_ASSIGN_OR_RETURN(uint32_t sd, w.Field(root, "storage_data", "Metadata"));
  if (t.at(sd).kind != PyKind::kDict) {
    return w.Bad("storage_data is " + Describe(t, sd) +
                 ", not a dict (a storage other than FileSystemWriter's?)");
  }
  const std::vector<uint32_t>& si = t.at(sd).items;
  for (size_t i = 0; i + 1 < si.size(); i += 2) {
    const std::string where = "storage_data entry " + std::to_string(i / 2);
    SP_RETURN_IF_ERROR(w.Object(si[i], {"MetadataIndex"}, where + " key").status());
    SP_RETURN_IF_ERROR(w.Object(si[i + 1], {"_StorageInfo"}, where).status());
    SP_ASSIGN_OR_RETURN(uint32_t fqn_v, w.Field(si[i], "fqn", where + " key"));
    SP_ASSIGN_OR_RETURN(std::string fqn, w.Str(fqn_v, where + " fqn"));
    SP_ASSIGN_OR_RETURN(uint32_t off_v, w.Field(si[i], "offset", where + " key", true));
    Shape offset;
    if (off_v != kNoValue && t.at(off_v).kind != PyKind::kNone) {
      SP_ASSIGN_OR_RETURN(offset, w.Size(off_v, where + " offset"));
    }
    DcpStorageInfo info;
    SP_ASSIGN_OR_RETURN(uint32_t p, w.Field(si[i + 1], "relative_path", where));
    SP_ASSIGN_OR_RETURN(info.relative_path, w.Str(p, "'" + fqn + "' relative_path"));
    SP_ASSIGN_OR_RETURN(uint32_t o, w.Field(si[i + 1], "offset", where));
    SP_ASSIGN_OR_RETURN(uint32_t l, w.Field(si[i + 1], "length", where));
    SP_ASSIGN_OR_RETURN(int64_t off, w.Int(o, "'" + fqn + "' offset"));
    SP_ASSIGN_OR_RETURN(int64_t len, w.Int(l, "'" + fqn + "' length"));
    if (off < 0 || len < 0) return w.Bad("'" + fqn + "' has a negative offset or length");
    info.offset = static_cast<uint64_t>(off);
    info.length = static_cast<uint64_t>(len);
    SP_ASSIGN_OR_RETURN(uint32_t tr, w.Field(si[i + 1], "transform_descriptors", where, true));
    if (tr != kNoValue && t.at(tr).kind != PyKind::kNone) {
      if (t.at(tr).kind != PyKind::kList && t.at(tr).kind != PyKind::kTuple) {
        return w.Bad("'" + fqn + "' transform_descriptors are not a list");
      }
      for (uint32_t d : t.at(tr).items) {
        SP_ASSIGN_OR_RETURN(std::string s, w.Str(d, "'" + fqn + "' transform descriptor"));
        info.transforms.push_back(std::move(s));
      }
    }
    if (!md.storage.emplace(std::pair{fqn, offset}, std::move(info)).second) {
      return w.Bad("storage_data holds '" + fqn + "' at " + ShapeToString(offset) + " twice");
    }
  }
  SP_RETURN_IF_ERROR(DecodeMCoreData(t, w, root, &md));
  return md;
}

}  // namespace shardpoint::internal_dcp
