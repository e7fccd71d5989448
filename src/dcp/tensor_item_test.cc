// torch.save tensor pickles (data.pkl) as torch writes them, and one test per
// malformed or refused one.
#include "src/dcp/tensor_item.h"

#include <gtest/gtest.h>

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

TEST(DcpTensorItemTest, NonContiguousStridesAreRefused) {
  ExpectError(DataPkl("FloatStorage", "0", 12, 0, {3, 4}, {1, 3}), StatusCode::kFailedPrecondition,
              "not C-contiguous");
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
  ExpectError("\x80\x02K\x01.", StatusCode::kDataLoss, "not a _rebuild_tensor_v2 call");
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

}  // namespace
}  // namespace shardpoint::internal_dcp
