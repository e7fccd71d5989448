#include "src/dcp/tensor_item_writer.h"

#include <array>

#include "src/dcp/pickle_writer.h"
#include "src/dcp/zip.h"

namespace shardpoint::internal_dcp {
namespace {

struct TorchNames {
  DType dtype;
  std::string_view storage, dtype_name;
};
constexpr std::array<TorchNames, 10> kTorch113{{
    {DType::kF32, "FloatStorage", "float32"},
    {DType::kF64, "DoubleStorage", "float64"},
    {DType::kF16, "HalfStorage", "float16"},
    {DType::kBF16, "BFloat16Storage", "bfloat16"},
    {DType::kU8, "ByteStorage", "uint8"},
    {DType::kI8, "CharStorage", "int8"},
    {DType::kI16, "ShortStorage", "int16"},
    {DType::kI32, "IntStorage", "int32"},
    {DType::kI64, "LongStorage", "int64"},
    {DType::kBool, "BoolStorage", "bool"},
}};

Result<const TorchNames*> Find(DType d) {
  for (const TorchNames& n : kTorch113) {
    if (n.dtype == d) return &n;
  }
  return FailedPreconditionError("dtype " + std::string(DTypeName(d)) +
                                 " has no torch 1.13 storage type (DCP cannot hold it)");
}

}  // namespace

Result<std::string_view> TorchStorageClass(DType dtype) {
  SP_ASSIGN_OR_RETURN(const TorchNames* n, Find(dtype));
  return n->storage;
}

Result<std::string_view> TorchDTypeName(DType dtype) {
  SP_ASSIGN_OR_RETURN(const TorchNames* n, Find(dtype));
  return n->dtype_name;
}

std::string EncodeTensorPickle(std::string_view storage_class, const Shape& shape) {
  Shape stride(shape.size(), 1);
  int64_t numel = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    stride[d] = numel;
    numel *= shape[d];
  }
  PickleWriter p;
  p.Global("torch._utils", "_rebuild_tensor_v2");
  p.Mark();
  {
    p.Mark();  // the persistent id of the storage
    p.Str("storage");
    p.Global("torch", storage_class);
    p.Str("0");
    p.Str("cpu");
    p.Int(numel);
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
  p.Tuple();
  p.Reduce();
  return std::move(p).Finish();
}

Result<TensorItemLayout> TensorItemLayout::Plan(DType dtype, const Shape& shape) {
  SP_ASSIGN_OR_RETURN(std::string_view cls, TorchStorageClass(dtype));
  TensorItemLayout l;
  l.data_bytes_ = static_cast<uint64_t>(Box::Whole(shape).num_elements()) * DTypeSize(dtype);
  std::string pkl = EncodeTensorPickle(cls, shape);
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
