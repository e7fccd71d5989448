// torch.save tensor pickles (data.pkl) as torch writes them, and one test per
// malformed or refused one.
#include "src/dcp/tensor_item.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>

#include "src/dcp/tensor_item_writer.h"
#include "src/dcp/zip.h"
#include "src/dcp/zip_writer.h"
#include "tests/testing/torch_newer_dtypes.h"

namespace shardpoint::internal_dcp {
namespace {

std::string Str(const std::string& s) {
  std::string out = "X";
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>(s.size() >> (8 * i)));
  return out + s;
}
std::string Int(int64_t v) {
  std::string out = "\x8a\x08";
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>(static_cast<uint64_t>(v) >> (8 * i)));
  return out;
}
std::string Tuple(const std::vector<int64_t>& v) {
  std::string out = "(";
  for (int64_t x : v) out += Int(x);
  return out + "t";
}

// The opcodes torch 1.13's torch.save writes for a tensor (protocol 2).
std::string DataPkl(const std::string& storage_type, const std::string& key, int64_t numel,
                    int64_t offset, const std::vector<int64_t>& size,
                    const std::vector<int64_t>& stride,
                    const std::string& rebuild = "torch._utils\n_rebuild_tensor_v2\n") {
  return "\x80\x02"
         "c" +
         rebuild + "((" + Str("storage") + "ctorch\n" + storage_type + "\n" + Str(key) +
         Str("cpu") + Int(numel) + "tQ" + Int(offset) + Tuple(size) + Tuple(stride) +
         "\x89"
         "ccollections\nOrderedDict\n)RtR.";
}

// The opcodes torch 2.x's torch.save writes for a tensor of a newer dtype
// (torch.storage._new_dtypes: float8, uint16/32/64): `_rebuild_tensor_v3` of
// an UntypedStorage whose numel is its byte count, the dtype last.
// `dtype_arg`: the opcodes of that seventh argument ("" leaves it out);
// `storage_type`: module and name of the storage class, as GLOBAL spells them.
std::string DataPklV3Args(const std::string& dtype_arg, int64_t nbytes, int64_t offset,
                          const std::vector<int64_t>& size, const std::vector<int64_t>& stride,
                          const std::string& storage_type = "torch.storage\nUntypedStorage") {
  return "\x80\x02"
         "ctorch._utils\n_rebuild_tensor_v3\n((" +
         Str("storage") + "c" + storage_type + "\n" + Str("0") + Str("cpu") + Int(nbytes) + "tQ" +
         Int(offset) + Tuple(size) + Tuple(stride) +
         "\x89"
         "ccollections\nOrderedDict\n)R" +
         dtype_arg + "tR.";
}
// ... with the dtype as torch pickles it: the global torch.<dtype>.
std::string DataPklV3(const std::string& dtype, int64_t nbytes, int64_t offset,
                      const std::vector<int64_t>& size, const std::vector<int64_t>& stride,
                      const std::string& storage_type = "torch.storage\nUntypedStorage") {
  return DataPklV3Args("ctorch\n" + dtype + "\n", nbytes, offset, size, stride, storage_type);
}

TEST(DcpTensorItemTest, DecodesStorageOffsetSizeAndStride) {
  Result<TorchSavedTensor> t =
      DecodeTensorPickle(DataPkl("BFloat16Storage", "3", 40, 4, {3, 4}, {4, 1}), "x");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->dtype, DType::kBF16);
  EXPECT_EQ(t->storage_key, "3");
  EXPECT_EQ(t->storage_numel, 40u);
  EXPECT_EQ(t->storage_offset, 4u);
  EXPECT_EQ(t->size, (Shape{3, 4}));
}

TEST(DcpTensorItemTest, UnitDimsMayHaveAnyStride) {
  EXPECT_TRUE(DecodeTensorPickle(DataPkl("FloatStorage", "0", 4, 0, {1, 4}, {99, 1}), "x").ok());
  EXPECT_TRUE(DecodeTensorPickle(DataPkl("FloatStorage", "0", 0, 0, {0, 4}, {7, 7}), "x").ok());
}

void ExpectError(const std::string& pkl, StatusCode code, const std::string& text) {
  Result<TorchSavedTensor> t = DecodeTensorPickle(pkl, "item 'w'");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), code) << t.status().ToString();
  EXPECT_NE(t.status().ToString().find(text), std::string::npos) << t.status().ToString();
  EXPECT_NE(t.status().ToString().find("item 'w'"), std::string::npos);
}

// A transposed, permuted or strided tensor decodes (not row_major: read as a
// strided view); negative strides and elements past the storage are DataLoss.
TEST(DcpTensorItemTest, StridedTensorsDecode) {
  Result<TorchSavedTensor> t =
      DecodeTensorPickle(DataPkl("FloatStorage", "0", 12, 0, {3, 4}, {1, 3}), "x");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_FALSE(t->row_major);
  EXPECT_EQ(t->stride, (Shape{1, 3}));
  t = DecodeTensorPickle(DataPkl("FloatStorage", "0", 80, 1, {5, 4}, {16, 1}), "x");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_FALSE(t->row_major);
  t = DecodeTensorPickle(DataPkl("FloatStorage", "0", 12, 0, {3, 4}, {4, 1}), "x");
  ASSERT_TRUE(t.ok());
  EXPECT_TRUE(t->row_major);
  ExpectError(DataPkl("FloatStorage", "0", 12, 1, {3, 4}, {1, 3}), StatusCode::kDataLoss,
              "reaches past its storage of 12");
  ExpectError(DataPkl("FloatStorage", "0", 12, 0, {3, 4}, {-1, 3}), StatusCode::kDataLoss,
              "negative");
}

// A broadcast (a zero stride) holds more elements than its storage: located
// as its whole storage entry, which lies inside the archive.
TEST(DcpTensorItemTest, StridedItemIsLocatedAsItsStorage) {
  const std::string pkl = DataPkl("FloatStorage", "0", 2, 0, {3, 2}, {0, 1});
  const std::string data(8, '\x11');
  ZipLayout z;
  const size_t p = z.Add("archive/data.pkl", pkl.size(), 1);
  const size_t d = z.Add("archive/data/0", data.size(), 64);
  z.SetCrc32(p, Crc32(0, pkl.data(), pkl.size()));
  z.SetCrc32(d, Crc32(0, data.data(), data.size()));
  std::string a(z.size(), '\0');
  a.replace(z.local_offset(p), z.LocalHeader(p).size(), z.LocalHeader(p));
  a.replace(z.data_offset(p), pkl.size(), pkl);
  a.replace(z.local_offset(d), z.LocalHeader(d).size(), z.LocalHeader(d));
  a.replace(z.data_offset(d), data.size(), data);
  a.replace(z.tail_offset(), z.Tail().size(), z.Tail());
  ZipReadAt read = [&a](uint64_t off, size_t n, char* dst) -> Status {
    if (off > a.size() || n > a.size() - off) return DataLossError("past the end");
    std::memcpy(dst, a.data() + off, n);
    return OkStatus();
  };
  Result<TensorItemBytes> t = LocateTensorItem(a.size(), read, "item 'b'");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_FALSE(t->tensor.row_major);
  EXPECT_EQ(t->offset, z.data_offset(d));
  EXPECT_EQ(t->nbytes, 8u);
}

TEST(DcpTensorItemTest, ElementsOutsideTheStorage) {
  ExpectError(DataPkl("FloatStorage", "0", 12, 1, {3, 4}, {4, 1}), StatusCode::kDataLoss,
              "outside its storage");
}

TEST(DcpTensorItemTest, OtherRebuildFunctionIsRefused) {
  ExpectError(
      DataPkl("FloatStorage", "0", 12, 0, {3, 4}, {4, 1}, "torch._utils\n_rebuild_sparse_tensor\n"),
      StatusCode::kFailedPrecondition, "'torch._utils._rebuild_sparse_tensor'");
}

TEST(DcpTensorItemTest, QuantizedStorageIsRefused) {
  ExpectError(DataPkl("QInt8Storage", "0", 12, 0, {3, 4}, {4, 1}), StatusCode::kFailedPrecondition,
              "'torch.QInt8Storage'");
}

TEST(DcpTensorItemTest, StorageKeyWithASlash) {
  ExpectError(DataPkl("FloatStorage", "../0", 12, 0, {3, 4}, {4, 1}), StatusCode::kDataLoss,
              "not a plain name");
}

TEST(DcpTensorItemTest, NegativeStorageOffset) {
  ExpectError(DataPkl("FloatStorage", "0", 12, -1, {3, 4}, {4, 1}), StatusCode::kDataLoss,
              "storage offset");
}

TEST(DcpTensorItemTest, NegativeSize) {
  ExpectError(DataPkl("FloatStorage", "0", 12, 0, {-3, 4}, {4, 1}), StatusCode::kDataLoss, "size");
}

TEST(DcpTensorItemTest, StrideOfAnotherRank) {
  ExpectError(DataPkl("FloatStorage", "0", 12, 0, {3, 4}, {1}), StatusCode::kDataLoss, "rank");
}

TEST(DcpTensorItemTest, NotATensor) {
  ExpectError("\x80\x02K\x01.", StatusCode::kDataLoss,
              "not a _rebuild_tensor_v2 or _rebuild_tensor_v3 call");
}

TEST(DcpTensorItemTest, StorageIdOfAnotherShape) {
  const std::string pkl =
      "\x80\x02"
      "ctorch._utils\n_rebuild_tensor_v2\n((" +
      Str("storage") + "tQ" + Int(0) + Tuple({1}) + Tuple({1}) +
      "\x89"
      "NtR.";
  ExpectError(pkl, StatusCode::kDataLoss, "storage id");
}

using NewerDType = ::shardpoint::testing::TorchNewerDType;
constexpr auto& kNewer = ::shardpoint::testing::kTorchNewerDTypes;

TEST(DcpTensorItemTest, DecodesTorch2NewerDTypes) {
  for (const NewerDType& c : kNewer) {
    const int64_t es = static_cast<int64_t>(DTypeSize(c.dtype));
    Result<TorchSavedTensor> t =
        DecodeTensorPickle(DataPklV3(c.name, 14 * es, 2, {3, 4}, {4, 1}), "x");
    ASSERT_TRUE(t.ok()) << c.name << ": " << t.status().ToString();
    EXPECT_EQ(t->dtype, c.dtype) << c.name;
    EXPECT_EQ(t->storage_numel, 14u) << c.name;  // elements, from 14 x es bytes
    EXPECT_EQ(t->storage_offset, 2u) << c.name;
    EXPECT_EQ(t->size, (Shape{3, 4})) << c.name;
  }
}

TEST(DcpTensorItemTest, WriterPicklesDecodeForEachTorch) {
  for (int major : {1, 2}) {
    for (DType d : {DType::kF32, DType::kBF16, DType::kI64, DType::kBool, DType::kU16, DType::kU32,
                    DType::kU64, DType::kF8E4M3, DType::kF8E5M2}) {
      Result<std::string> pkl = EncodeTensorPickle(d, {5, 3}, major);
      const bool newer = std::any_of(std::begin(kNewer), std::end(kNewer),
                                     [d](const NewerDType& n) { return n.dtype == d; });
      if (major == 1 && newer) {
        ASSERT_EQ(pkl.status().code(), StatusCode::kFailedPrecondition) << DTypeName(d);
        EXPECT_NE(pkl.status().message().find("torch 1.13"), std::string::npos);
        continue;
      }
      ASSERT_TRUE(pkl.ok()) << DTypeName(d) << ": " << pkl.status().ToString();
      EXPECT_EQ(pkl->find("_rebuild_tensor_v3") != std::string::npos, newer) << DTypeName(d);
      Result<TorchSavedTensor> t = DecodeTensorPickle(*pkl, "x");
      ASSERT_TRUE(t.ok()) << DTypeName(d) << ": " << t.status().ToString();
      EXPECT_EQ(t->dtype, d);
      EXPECT_EQ(t->storage_numel, 15u);
      EXPECT_EQ(t->size, (Shape{5, 3}));
      EXPECT_EQ(t->stride, (Shape{3, 1}));
    }
  }
}

TEST(DcpTensorItemTest, V3OfATypedStorageIsRefused) {
  ExpectError(DataPklV3("uint16", 24, 0, {3, 4}, {4, 1}, "torch\nShortStorage"),
              StatusCode::kDataLoss, "not torch.storage.UntypedStorage");
}

// What shardpoint's DCP writer named the class before it wrote the module
// torch does (torch.storage): still read.
TEST(DcpTensorItemTest, V3OfTheOldUntypedStorageNameDecodes) {
  Result<TorchSavedTensor> t =
      DecodeTensorPickle(DataPklV3("uint16", 24, 0, {3, 4}, {4, 1}, "torch\nUntypedStorage"), "x");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->dtype, DType::kU16);
  EXPECT_EQ(t->storage_numel, 12u);
}

TEST(DcpTensorItemTest, V3BytesNotWholeElements) {
  ExpectError(DataPklV3("uint32", 47, 0, {3, 4}, {4, 1}), StatusCode::kDataLoss,
              "47 bytes is not a whole number of torch.uint32 elements");
}

TEST(DcpTensorItemTest, V3DTypeWithoutAnEquivalent) {
  ExpectError(DataPklV3("float8_e4m3fnuz", 12, 0, {3, 4}, {4, 1}), StatusCode::kFailedPrecondition,
              "'torch.float8_e4m3fnuz' has no shardpoint equivalent");
  ExpectError(DataPklV3("complex32", 48, 0, {3, 4}, {4, 1}), StatusCode::kFailedPrecondition,
              "'torch.complex32'");
}

TEST(DcpTensorItemTest, V3WithoutItsDType) {
  ExpectError(DataPklV3Args("", 24, 0, {3, 4}, {4, 1}), StatusCode::kDataLoss,
              "rebuild call has 6 arguments");
  ExpectError(DataPklV3Args(Str("uint16"), 24, 0, {3, 4}, {4, 1}), StatusCode::kDataLoss,
              "_rebuild_tensor_v3 dtype is");
}

// torch never names a typed storage for the newer dtypes.
TEST(DcpTensorItemTest, TypedStorageOfANewerDTypeIsRefused) {
  ExpectError(DataPkl("UInt16Storage", "0", 12, 0, {3, 4}, {4, 1}), StatusCode::kFailedPrecondition,
              "'torch.UInt16Storage'");
}

// The same, as torch 2.11's torch.save pickled them (memo and all):
// tests/dcp/fixtures/make_torch2_newer_dtypes.py.
TEST(DcpTensorItemTest, Torch2PickledNewerDTypesDecode) {
  for (const NewerDType& c : kNewer) {
    std::string f = __FILE__;
    f = f.substr(0, f.rfind("/src/dcp/")) + "/tests/dcp/fixtures/v3_pickles/" + c.name;
    std::ifstream in(f, std::ios::binary);
    if (!in) in.open(std::string("tests/dcp/fixtures/v3_pickles/") + c.name, std::ios::binary);
    ASSERT_TRUE(in) << c.name;
    std::stringstream bytes;
    bytes << in.rdbuf();
    Result<TorchSavedTensor> t = DecodeTensorPickle(bytes.str(), c.name);
    ASSERT_TRUE(t.ok()) << c.name << ": " << t.status().ToString();
    EXPECT_EQ(t->dtype, c.dtype) << c.name;
    EXPECT_EQ(t->storage_key, "0");
    EXPECT_EQ(t->storage_numel, 12u) << c.name;
    EXPECT_EQ(t->storage_offset, 0u);
    EXPECT_EQ(t->size, (Shape{3, 4}));
    EXPECT_EQ(t->stride, (Shape{4, 1}));
  }
}

}  // namespace
}  // namespace shardpoint::internal_dcp
