#include "src/dcp/tensor_item.h"

#include <array>

#include "src/base/limits.h"
#include "src/dcp/metadata.h"
#include "src/dcp/pickle.h"
#include "src/dcp/strided_file.h"

using shardpoint::internal_base::kMaxRank;

namespace shardpoint::internal_dcp {
namespace {

struct StorageType {
  std::string_view name;
  DType dtype;
};
// torch's typed storage classes as torch.save names them (for the dtypes of
// torch 1.x; torch 2.x saves newer dtypes as an untyped storage, below).
constexpr std::array<StorageType, 10> kStorageTypes{{
    {"FloatStorage", DType::kF32},
    {"DoubleStorage", DType::kF64},
    {"HalfStorage", DType::kF16},
    {"BFloat16Storage", DType::kBF16},
    {"ByteStorage", DType::kU8},
    {"CharStorage", DType::kI8},
    {"ShortStorage", DType::kI16},
    {"IntStorage", DType::kI32},
    {"LongStorage", DType::kI64},
    {"BoolStorage", DType::kBool},
}};
// torch >= 2.1 saves float8 (and >= 2.3 uint16/32/64) tensors as
// `_rebuild_tensor_v3` of an untyped storage (numel in bytes) with the dtype as
// a further argument (torch.storage._new_dtypes). The class pickles under its
// own module, `torch.storage.UntypedStorage`; `torch.UntypedStorage` is what
// shardpoint's DCP writer wrote for it before 2026-11-27, read too.
constexpr std::string_view kV2 = "torch._utils._rebuild_tensor_v2";
constexpr std::string_view kV3 = "torch._utils._rebuild_tensor_v3";
constexpr std::string_view kUntyped = "torch.storage.UntypedStorage";
constexpr std::string_view kUntypedOld = "torch.UntypedStorage";

Status Bad(const std::string& what, const std::string& m) {
  return DataLossError("'" + what + "': torch.save tensor " + m);
}

Result<Shape> Ints(const PickleTree& t, uint32_t v, bool nonneg, const std::string& what,
                   const std::string& field) {
  if (t.at(v).kind != PyKind::kTuple) return Bad(what, field + " is not a tuple");
  if (t.at(v).items.size() > kMaxRank) return Bad(what, field + " has rank > 32");
  Shape s;
  for (uint32_t i : t.at(v).items) {
    if (t.at(i).kind != PyKind::kInt || (nonneg && t.at(i).i < 0)) {
      return Bad(what, field + " holds " + Describe(t, i));
    }
    s.push_back(t.at(i).i);
  }
  return s;
}

}  // namespace

bool TensorPickleClassAllowed(std::string_view module, std::string_view name) {
  if (module == "torch._utils") return name == "_rebuild_tensor_v2" || name == "_rebuild_tensor_v3";
  if (module == "collections") return name == "OrderedDict";
  if (module == "torch.storage") return name == "UntypedStorage";
  if (module == "torch") {
    for (const StorageType& s : kStorageTypes) {
      if (s.name == name) return true;
    }
    return name == "UntypedStorage" || IsTorchDType(name);
  }
  return false;
}

Result<TorchSavedTensor> DecodeTensorPickle(std::string_view data_pkl, const std::string& what) {
  SP_ASSIGN_OR_RETURN(PickleTree t, ParsePickle(data_pkl, TensorPickleClassAllowed, what));
  const PyValue& root = t.at(t.root);
  const bool v3 = root.kind == PyKind::kCall && t.at(root.callable).text == kV3;
  if (root.kind != PyKind::kCall || (!v3 && t.at(root.callable).text != kV2)) {
    return Bad(what, "pickle is " + Describe(t, t.root) +
                         ", not a _rebuild_tensor_v2 or _rebuild_tensor_v3 call");
  }
  // (storage, storage_offset, size, stride, requires_grad, backward_hooks[, metadata]);
  // v3: (storage, storage_offset, size, stride, requires_grad, backward_hooks, dtype[, metadata])
  const std::vector<uint32_t>& args = t.at(root.args).items;
  if (args.size() < (v3 ? 7u : 4u))
    return Bad(what, "rebuild call has " + std::to_string(args.size()) + " arguments");
  const PyValue& pid = t.at(args[0]);
  if (pid.kind != PyKind::kPersId || t.at(pid.args).kind != PyKind::kTuple) {
    return Bad(what, "storage is not a persistent id tuple");
  }
  // ('storage', storage type, key, location, numel)
  const std::vector<uint32_t>& st = t.at(pid.args).items;
  if (st.size() != 5 || t.at(st[0]).kind != PyKind::kStr || t.at(st[0]).text != "storage" ||
      t.at(st[1]).kind != PyKind::kGlobal || t.at(st[2]).kind != PyKind::kStr ||
      t.at(st[4]).kind != PyKind::kInt || t.at(st[4]).i < 0) {
    return Bad(what, "storage id is not ('storage', type, key, location, numel)");
  }
  TorchSavedTensor out;
  const std::string& type = t.at(st[1]).text;
  out.storage_numel = static_cast<uint64_t>(t.at(st[4]).i);
  if (v3) {
    if (type != kUntyped && type != kUntypedOld) {
      return Bad(what,
                 "_rebuild_tensor_v3 storage type is '" + type + "', not " + std::string(kUntyped));
    }
    if (t.at(args[6]).kind != PyKind::kGlobal) {
      return Bad(what, "_rebuild_tensor_v3 dtype is " + Describe(t, args[6]));
    }
    Result<DType> d = DTypeFromTorchName(t.at(args[6]).text);
    if (!d.ok()) return d.status().WithContext("'" + what + "'");
    out.dtype = *d;
    const uint64_t es = DTypeSize(out.dtype);
    if (out.storage_numel % es != 0) {
      return Bad(what, "untyped storage of " + std::to_string(out.storage_numel) +
                           " bytes is not a whole number of " + t.at(args[6]).text + " elements");
    }
    out.storage_numel /= es;
  } else {
    bool known = false;
    for (const StorageType& s : kStorageTypes) {
      if (type == "torch." + std::string(s.name)) {
        out.dtype = s.dtype;
        known = true;
      }
    }
    if (!known) return Bad(what, "storage type '" + type + "' is unknown");
  }
  out.storage_key = t.at(st[2]).text;
  if (out.storage_key.empty() || out.storage_key.find('/') != std::string::npos) {
    return Bad(what, "storage key '" + out.storage_key + "' is not a plain name");
  }
  if (t.at(args[1]).kind != PyKind::kInt || t.at(args[1]).i < 0) {
    return Bad(what, "storage offset is " + Describe(t, args[1]));
  }
  out.storage_offset = static_cast<uint64_t>(t.at(args[1]).i);
  SP_ASSIGN_OR_RETURN(out.size, Ints(t, args[2], true, what, "size"));
  SP_ASSIGN_OR_RETURN(out.stride, Ints(t, args[3], false, what, "stride"));
  if (out.stride.size() != out.size.size()) return Bad(what, "size and stride differ in rank");
  Result<int64_t> n = CheckedNumElements(out.size);
  if (!n.ok()) return Bad(what, "size " + ShapeToString(out.size) + " overflows");
  if (*n > 0) {
    out.row_major = internal_dcp::IsRowMajor(out.size, out.stride);
    if (out.row_major) {
      const uint64_t end = out.storage_offset + static_cast<uint64_t>(*n);
      if (end < out.storage_offset || end > out.storage_numel) {
        return Bad(what, "elements [" + std::to_string(out.storage_offset) + ", " +
                             std::to_string(end) + ") lie outside its storage of " +
                             std::to_string(out.storage_numel));
      }
    } else {
      // Read as a strided view (src/dcp/strided_file.h).
      StridedView v;
      v.storage_elements = out.storage_numel;
      v.element_size = static_cast<uint32_t>(DTypeSize(out.dtype));
      v.first = out.storage_offset;
      v.size = out.size;
      v.stride = out.stride;
      SP_RETURN_IF_ERROR(CheckStridedView(v, "'" + what + "': torch.save tensor"));
    }
  }
  return out;
}

Result<TensorItemBytes> LocateTensorItem(uint64_t size, const ZipReadAt& read,
                                         const std::string& what) {
  SP_ASSIGN_OR_RETURN(std::vector<ZipEntry> entries, ReadZipDirectory(size, read, what));
  const ZipEntry* pkl = nullptr;
  for (const ZipEntry& e : entries) {
    const size_t slash = e.name.find('/');
    if (slash != std::string::npos && e.name.compare(slash, std::string::npos, "/data.pkl") == 0) {
      if (pkl) return Bad(what, "archive holds two data.pkl entries");
      pkl = &e;
    }
  }
  if (!pkl) return Bad(what, "archive has no <name>/data.pkl entry (not a torch.save file)");
  const std::string prefix = pkl->name.substr(0, pkl->name.size() - 8);  // keeps the '/'
  if (pkl->size > kMaxDataPklBytes) {
    return FailedPreconditionError("'" + what + "': data.pkl of " + std::to_string(pkl->size) +
                                   " bytes (at most " + std::to_string(kMaxDataPklBytes) +
                                   " are read for one tensor)");
  }
  std::string bytes(pkl->size, '\0');
  if (!bytes.empty()) SP_RETURN_IF_ERROR(read(pkl->data_offset, bytes.size(), bytes.data()));
  TensorItemBytes out;
  SP_ASSIGN_OR_RETURN(out.tensor, DecodeTensorPickle(bytes, what));
  for (const ZipEntry& e : entries) {
    if (e.name != prefix + "byteorder") continue;
    std::string order(std::min<uint64_t>(e.size, 16), '\0');
    if (!order.empty()) SP_RETURN_IF_ERROR(read(e.data_offset, order.size(), order.data()));
    if (order != "little") {
      return FailedPreconditionError("'" + what + "': byteorder '" + order +
                                     "' (only little-endian tensors are read)");
    }
  }
  const std::string data_name = prefix + "data/" + out.tensor.storage_key;
  const ZipEntry* data = nullptr;
  for (const ZipEntry& e : entries) {
    if (e.name == data_name) data = &e;
  }
  if (!data) return Bad(what, "archive has no storage entry '" + data_name + "'");
  const uint64_t es = DTypeSize(out.tensor.dtype);
  if (out.tensor.storage_numel > data->size / es || data->size != out.tensor.storage_numel * es) {
    return Bad(what, "storage entry '" + data_name + "' holds " + std::to_string(data->size) +
                         " bytes, not " + std::to_string(out.tensor.storage_numel) +
                         " elements of " + std::to_string(es));
  }
  out.storage = *data;
  const uint64_t n = static_cast<uint64_t>(Box::Whole(out.tensor.size).num_elements());
  if (out.tensor.row_major) {
    out.offset = data->data_offset + (n ? out.tensor.storage_offset * es : 0);
    out.nbytes = n * es;
  } else {  // the whole storage: the elements lie anywhere in it
    out.offset = data->data_offset;
    out.nbytes = data->size;
  }
  return out;
}

}  // namespace shardpoint::internal_dcp
