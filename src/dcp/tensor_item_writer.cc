#include "src/dcp/tensor_item_writer.h"

#include <array>

#include "src/dcp/pickle_writer.h"
#include "src/dcp/zip.h"

namespace shardpoint::internal_dcp {
namespace {

struct TorchNames {
  DType dtype;
  std::string_view storage, dtype_name;  // storage empty: an untyped storage (v3)
  int since_major;                       // the first torch major version with the dtype
};
constexpr std::array<TorchNames, 15> kTorch{{
    {DType::kF32, "FloatStorage", "float32", 1},
    {DType::kF64, "DoubleStorage", "float64", 1},
    {DType::kF16, "HalfStorage", "float16", 1},
    {DType::kBF16, "BFloat16Storage", "bfloat16", 1},
    {DType::kU8, "ByteStorage", "uint8", 1},
    {DType::kI8, "CharStorage", "int8", 1},
    {DType::kI16, "ShortStorage", "int16", 1},
    {DType::kI32, "IntStorage", "int32", 1},
    {DType::kI64, "LongStorage", "int64", 1},
    {DType::kBool, "BoolStorage", "bool", 1},
    // torch.storage._new_dtypes: saved as `_rebuild_tensor_v3` of an
    // UntypedStorage (float8 since 2.1, uint16/32/64 since 2.3).
    {DType::kU16, "", "uint16", 2},
    {DType::kU32, "", "uint32", 2},
    {DType::kU64, "", "uint64", 2},
    {DType::kF8E4M3, "", "float8_e4m3fn", 2},
    {DType::kF8E5M2, "", "float8_e5m2", 2},
}};

Result<const TorchNames*> Find(DType d, int torch_major) {
  for (const TorchNames& n : kTorch) {
    if (n.dtype == d && n.since_major <= torch_major) return &n;
  }
  return FailedPreconditionError("dtype " + std::string(DTypeName(d)) + " has no torch " +
                                 (torch_major == 1 ? std::string("1.13") : "2.x") +
                                 " equivalent (DCP cannot hold it" +
                                 (torch_major == 1 ? "; --torch 2 writes it" : "") + ")");
}

}  // namespace

Result<std::string_view> TorchDTypeName(DType dtype, int torch_major) {
  SP_ASSIGN_OR_RETURN(const TorchNames* n, Find(dtype, torch_major));
  return n->dtype_name;
}

Result<std::string> EncodeTensorPickle(DType dtype, const Shape& shape, int torch_major) {
  SP_ASSIGN_OR_RETURN(const TorchNames* n, Find(dtype, torch_major));
  const bool v3 = n->storage.empty();
  Shape stride(shape.size(), 1);
  int64_t numel = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    stride[d] = numel;
    numel *= shape[d];
  }
  PickleWriter p;
  p.Global("torch._utils", v3 ? "_rebuild_tensor_v3" : "_rebuild_tensor_v2");
  p.Mark();
  {
    p.Mark();  // the persistent id of the storage
    p.Str("storage");
    p.Global(v3 ? "torch.storage" : "torch", v3 ? "UntypedStorage" : n->storage);
    p.Str("0");
    p.Str("cpu");
    p.Int(v3 ? numel * static_cast<int64_t>(DTypeSize(dtype)) : numel);  // v3: bytes
    p.Tuple();
    p.BinPersId();
  }
  p.Int(0);  // storage offset
  p.IntTuple(shape);
  p.IntTuple(stride);
  p.Bool(false);  // requires_grad
  p.Global("collections", "OrderedDict");
  p.EmptyTuple();
  p.Reduce();  // backward hooks
  if (v3) p.Global("torch", n->dtype_name);
  p.Tuple();
  p.Reduce();
  return std::move(p).Finish();
}

Result<TensorItemLayout> TensorItemLayout::Plan(DType dtype, const Shape& shape, int torch_major) {
  SP_ASSIGN_OR_RETURN(std::string pkl, EncodeTensorPickle(dtype, shape, torch_major));
  TensorItemLayout l;
  l.data_bytes_ = static_cast<uint64_t>(Box::Whole(shape).num_elements()) * DTypeSize(dtype);
  l.small_.push_back({l.zip_.Add("archive/data.pkl", pkl.size(), 1), std::move(pkl)});
  l.small_.push_back({l.zip_.Add("archive/byteorder", 6, 1), "little"});
  l.data_ = l.zip_.Add("archive/data/0", l.data_bytes_, 64);
  l.small_.push_back({l.zip_.Add("archive/version", 2, 1), "3\n"});
  for (const auto& [entry, bytes] : l.small_) {
    l.zip_.SetCrc32(entry, Crc32(0, bytes.data(), bytes.size()));
  }
  return l;
}

std::vector<std::pair<uint64_t, std::string>> TensorItemLayout::OtherBytes(
    uint32_t data_crc32) const {
  ZipLayout zip = zip_;
  zip.SetCrc32(data_, data_crc32);
  std::vector<std::pair<uint64_t, std::string>> out;
  for (const auto& [entry, bytes] : small_) {
    out.push_back({zip.local_offset(entry), zip.LocalHeader(entry) + bytes});
  }
  out.push_back({zip.local_offset(data_), zip.LocalHeader(data_)});
  out.push_back({zip.tail_offset(), zip.Tail()});
  return out;
}

}  // namespace shardpoint::internal_dcp
