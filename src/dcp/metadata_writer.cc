#include "src/dcp/metadata_writer.h"

#include <algorithm>
#include <string_view>

#include "src/dcp/pickle_writer.h"
#include "src/dcp/tensor_item_writer.h"

namespace shardpoint::internal_dcp {
namespace {

// cls() with its fields set by BUILD from a dict: how pickle stores a dataclass.
// `fields` emits key/value pairs.
template <typename F>
void Dataclass(PickleWriter& p, std::string_view module, std::string_view cls, F fields) {
  p.Global(module, cls);
  p.EmptyTuple();
  p.NewObj();
  p.EmptyDict();
  p.Mark();
  fields();
  p.SetItems();
  p.Build();
}

// The chunk's index among the chunks of tensor `fqn` whose offset is
// `offset`, or -1 when there is none (a byte item, or no such chunk).
int64_t ChunkIndex(const DcpMetadata& md, const std::string& fqn, const Shape& offset) {
  auto t = std::lower_bound(md.tensors.begin(), md.tensors.end(), fqn,
                            [](const DcpTensorMeta& a, const std::string& f) { return a.fqn < f; });
  if (t == md.tensors.end() || t->fqn != fqn) return -1;
  for (size_t i = 0; i < t->chunks.size(); ++i) {
    if (t->chunks[i].offset == offset) return static_cast<int64_t>(i);
  }
  return -1;
}

// Pickles one DcpMetadata, a field of the Metadata dataclass at a time.
class MetadataEncoder {
 public:
  MetadataEncoder(const DcpMetadata& md, const DcpModules& mods) : md_(md), mods_(mods) {}

  Result<std::string> Encode() && {
    Status status = OkStatus();
    Dataclass(p_, mods_.metadata, "Metadata", [&] {
      p_.Str("state_dict_metadata");
      status = StateDictMetadata();
      if (!status.ok()) return;
      p_.Str("planner_data");
      p_.None();
      p_.Str("storage_data");
      status = StorageData();
    });
    SP_RETURN_IF_ERROR(status);
    return std::move(p_).Finish();
  }

 private:
  // torch.Size(s).
  void Size(const Shape& s) {
    p_.Global("torch", "Size");
    p_.Mark();
    p_.IntTuple(s);
    p_.Tuple();
    p_.Reduce();
  }

  // fqn -> TensorStorageMetadata or BytesStorageMetadata, tensors first.
  Status StateDictMetadata() {
    p_.EmptyDict();
    p_.Mark();
    for (const DcpTensorMeta& t : md_.tensors) {
      Result<std::string_view> dtype = TorchDTypeName(t.dtype, md_.torch_major);
      if (!dtype.ok()) return dtype.status().WithContext("tensor '" + t.fqn + "'");
      p_.Str(t.fqn);
      TensorStorageMetadata(t, *dtype);
    }
    for (const std::string& b : md_.bytes) {
      p_.Str(b);
      Dataclass(p_, mods_.metadata, "BytesStorageMetadata", [] {});
    }
    p_.SetItems();
    return OkStatus();
  }

  void TensorStorageMetadata(const DcpTensorMeta& t, std::string_view dtype) {
    Dataclass(p_, mods_.metadata, "TensorStorageMetadata", [&] {
      p_.Str("properties");
      TensorProperties(dtype);
      p_.Str("size");
      Size(t.shape);
      p_.Str("chunks");
      p_.EmptyList();
      p_.Mark();
      for (const Box& c : t.chunks) {
        Dataclass(p_, mods_.metadata, "ChunkStorageMetadata", [&] {
          p_.Str("offsets");
          Size(c.offset);
          p_.Str("sizes");
          Size(c.shape);
        });
      }
      p_.Appends();
    });
  }

  // TensorProperties set by its __setstate__ from the tuple
  // (dtype, layout, requires_grad, memory format, pin_memory).
  void TensorProperties(std::string_view dtype) {
    p_.Global(mods_.properties, "TensorProperties");
    p_.EmptyTuple();
    p_.NewObj();
    p_.Mark();
    p_.Global("torch", dtype);
    p_.Global("torch.serialization", "_get_layout");
    p_.Mark();
    p_.Str("torch.strided");
    p_.Tuple();
    p_.Reduce();
    p_.Bool(false);
    if (md_.torch_major == 1) {  // getattr(MEM_FORMAT_ENCODING, "TORCH_CONTIGUOUS_FORMAT")
      p_.Global("builtins", "getattr");
      p_.Mark();
      p_.Global(mods_.properties, "MEM_FORMAT_ENCODING");
      p_.Str("TORCH_CONTIGUOUS_FORMAT");
    } else {  // _MEM_FORMAT_ENCODING(0), as torch 2.x pickles the enum member
      p_.Global(mods_.properties, "_MEM_FORMAT_ENCODING");
      p_.Mark();
      p_.Int(0);
    }
    p_.Tuple();
    p_.Reduce();
    p_.Bool(false);
    p_.Tuple();
    p_.Build();
  }

  // MetadataIndex -> _StorageInfo, in the storage map's order.
  Status StorageData() {
    p_.EmptyDict();
    p_.Mark();
    for (const auto& [key, info] : md_.storage) {
      const std::string& fqn = key.first;
      const Shape& offset = key.second;
      // The chunk's index among its tensor's chunks (None for a byte item).
      const int64_t index = ChunkIndex(md_, fqn, offset);
      if (index < 0 &&
          (!offset.empty() || !std::binary_search(md_.bytes.begin(), md_.bytes.end(), fqn))) {
        return InvalidArgumentError("storage entry '" + fqn + "' at " + ShapeToString(offset) +
                                    " names no chunk or byte item");
      }
      MetadataIndex(fqn, offset, index);
      StorageInfo(info);
    }
    p_.SetItems();
    return OkStatus();
  }

  // index < 0: a byte item, whose offset and index are None.
  void MetadataIndex(const std::string& fqn, const Shape& offset, int64_t index) {
    Dataclass(p_, mods_.metadata, "MetadataIndex", [&] {
      p_.Str("fqn");
      p_.Str(fqn);
      p_.Str("offset");
      if (index < 0) {
        p_.None();
      } else {
        Size(offset);
      }
      p_.Str("index");
      if (index < 0) {
        p_.None();
      } else {
        p_.Int(index);
      }
    });
  }

  void StorageInfo(const DcpStorageInfo& info) {
    Dataclass(p_, mods_.filesystem, "_StorageInfo", [&] {
      p_.Str("relative_path");
      p_.Str(info.relative_path);
      p_.Str("offset");
      p_.Int(static_cast<int64_t>(info.offset));
      p_.Str("length");
      p_.Int(static_cast<int64_t>(info.length));
    });
  }

  const DcpMetadata& md_;
  const DcpModules& mods_;
  PickleWriter p_;
};

}  // namespace

Result<std::string> EncodeDcpMetadata(const DcpMetadata& md) {
  if (md.torch_major != 1 && md.torch_major != 2) {
    return InvalidArgumentError("DCP metadata for torch major version " +
                                std::to_string(md.torch_major) +
                                ": only 1 (1.13) and 2 are written");
  }
  return MetadataEncoder(md, md.torch_major == 1 ? kDcpTorch1 : kDcpTorch2).Encode();
}

}  // namespace shardpoint::internal_dcp
