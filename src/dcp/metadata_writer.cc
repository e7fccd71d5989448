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

}  // namespace

Result<std::string> EncodeDcpMetadata(const DcpMetadata& md) {
  if (md.torch_major != 1 && md.torch_major != 2) {
    return InvalidArgumentError("DCP metadata for torch major version " +
                                std::to_string(md.torch_major) +
                                ": only 1 (1.13) and 2 are written");
  }
  const DcpModules& mods = md.torch_major == 1 ? kDcpTorch1 : kDcpTorch2;
  const std::string_view kMod = mods.metadata;
  PickleWriter p;
  auto size = [&p](const Shape& s) {
    p.Global("torch", "Size");
    p.Mark();
    p.IntTuple(s);
    p.Tuple();
    p.Reduce();
  };
  Status status = OkStatus();
  Dataclass(p, kMod, "Metadata", [&] {
    p.Str("state_dict_metadata");
    p.EmptyDict();
    p.Mark();
    for (const DcpTensorMeta& t : md.tensors) {
      Result<std::string_view> dtype = TorchDTypeName(t.dtype, md.torch_major);
      if (!dtype.ok()) {
        status = dtype.status().WithContext("tensor '" + t.fqn + "'");
        return;
      }
      p.Str(t.fqn);
      Dataclass(p, kMod, "TensorStorageMetadata", [&] {
        p.Str("properties");
        p.Global(mods.properties, "TensorProperties");
        p.EmptyTuple();
        p.NewObj();
        p.Mark();  // __getstate__: (dtype, layout, requires_grad, memory format, pin_memory)
        p.Global("torch", *dtype);
        p.Global("torch.serialization", "_get_layout");
        p.Mark();
        p.Str("torch.strided");
        p.Tuple();
        p.Reduce();
        p.Bool(false);
        if (md.torch_major == 1) {  // getattr(MEM_FORMAT_ENCODING, "TORCH_CONTIGUOUS_FORMAT")
          p.Global("builtins", "getattr");
          p.Mark();
          p.Global(mods.properties, "MEM_FORMAT_ENCODING");
          p.Str("TORCH_CONTIGUOUS_FORMAT");
        } else {  // _MEM_FORMAT_ENCODING(0), as torch 2.x pickles the enum member
          p.Global(mods.properties, "_MEM_FORMAT_ENCODING");
          p.Mark();
          p.Int(0);
        }
        p.Tuple();
        p.Reduce();
        p.Bool(false);
        p.Tuple();
        p.Build();
        p.Str("size");
        size(t.shape);
        p.Str("chunks");
        p.EmptyList();
        p.Mark();
        for (const Box& c : t.chunks) {
          Dataclass(p, kMod, "ChunkStorageMetadata", [&] {
            p.Str("offsets");
            size(c.offset);
            p.Str("sizes");
            size(c.shape);
          });
        }
        p.Appends();
      });
    }
    for (const std::string& b : md.bytes) {
      p.Str(b);
      Dataclass(p, kMod, "BytesStorageMetadata", [] {});
    }
    p.SetItems();
    p.Str("planner_data");
    p.None();
    p.Str("storage_data");
    p.EmptyDict();
    p.Mark();
    for (const auto& entry : md.storage) {
      // Plain references, not structured bindings: lambdas below capture
      // them (clang before 16 cannot capture a structured binding).
      const std::string& fqn = entry.first.first;
      const auto& offset = entry.first.second;
      const auto& info = entry.second;
      // The chunk's index among its tensor's chunks (None for a byte item).
      int64_t index = -1;
      auto t =
          std::lower_bound(md.tensors.begin(), md.tensors.end(), fqn,
                           [](const DcpTensorMeta& a, const std::string& f) { return a.fqn < f; });
      if (t != md.tensors.end() && t->fqn == fqn) {
        for (size_t i = 0; i < t->chunks.size() && index < 0; ++i) {
          if (t->chunks[i].offset == offset) index = static_cast<int64_t>(i);
        }
      }
      if (index < 0 &&
          (!offset.empty() || !std::binary_search(md.bytes.begin(), md.bytes.end(), fqn))) {
        status = InvalidArgumentError("storage entry '" + fqn + "' at " + ShapeToString(offset) +
                                      " names no chunk or byte item");
        return;
      }
      Dataclass(p, kMod, "MetadataIndex", [&] {
        p.Str("fqn");
        p.Str(fqn);
        p.Str("offset");
        if (index < 0) {
          p.None();
        } else {
          size(offset);
        }
        p.Str("index");
        if (index < 0) {
          p.None();
        } else {
          p.Int(index);
        }
      });
      Dataclass(p, mods.filesystem, "_StorageInfo", [&] {
        p.Str("relative_path");
        p.Str(info.relative_path);
        p.Str("offset");
        p.Int(static_cast<int64_t>(info.offset));
        p.Str("length");
        p.Int(static_cast<int64_t>(info.length));
      });
    }
    p.SetItems();
  });
  SP_RETURN_IF_ERROR(status);
  return std::move(p).Finish();
}

}  // namespace shardpoint::internal_dcp
