// The one byte codec: its layout (pinned by literal bytes, so every encoding
// built on it stays byte-identical) and one test per malformed input.
#include "src/base/bytes.h"

#include <gtest/gtest.h>
#include <sys/mman.h>

#include <string>
#include <vector>

namespace shardpoint::internal_base {
namespace {

void ExpectDataLoss(const Status& s, const std::string& needle) {
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.ToString();
  EXPECT_NE(s.message().find(needle), std::string::npos)
      << "'" << s.message() << "' lacks '" << needle << "'";
}

std::string Bytes(std::initializer_list<int> v) {
  std::string s;
  for (int b : v) s.push_back(static_cast<char>(b));
  return s;
}

TEST(BytesTest, LayoutIsLittleEndianWithTheDocumentedPrefixes) {
  ByteWriter w;
  w.U8(0xab);
  w.U32(0x01020304);
  w.U64(0x1122334455667788);
  w.I64(-2);
  w.Str("hi");
  w.Blob("xyz");
  w.Ints({5, 7});
  w.Dims({9});
  ASSERT_TRUE(w.status().ok());
  const std::string want = Bytes({0xab}) + Bytes({4, 3, 2, 1}) +
                           Bytes({0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11}) +
                           Bytes({0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}) +
                           Bytes({2, 0, 0, 0}) + "hi" + Bytes({3, 0, 0, 0, 0, 0, 0, 0}) + "xyz" +
                           Bytes({2}) + Bytes({5, 0, 0, 0, 0, 0, 0, 0}) +
                           Bytes({7, 0, 0, 0, 0, 0, 0, 0}) + Bytes({9, 0, 0, 0, 0, 0, 0, 0});
  EXPECT_EQ(w.str(), want);

  ByteReader r(want, "layout");
  uint8_t a;
  uint32_t b;
  uint64_t c;
  int64_t d;
  std::string s, blob;
  std::vector<int64_t> ints, dims;
  ASSERT_TRUE(r.U8(&a).ok());
  ASSERT_TRUE(r.U32(&b).ok());
  ASSERT_TRUE(r.U64(&c).ok());
  ASSERT_TRUE(r.I64(&d).ok());
  ASSERT_TRUE(r.Str(&s).ok());
  ASSERT_TRUE(r.Blob(&blob).ok());
  ASSERT_TRUE(r.Ints(&ints).ok());
  ASSERT_TRUE(r.Dims(1, &dims).ok());
  EXPECT_EQ(a, 0xab);
  EXPECT_EQ(b, 0x01020304u);
  EXPECT_EQ(c, 0x1122334455667788u);
  EXPECT_EQ(d, -2);
  EXPECT_EQ(s, "hi");
  EXPECT_EQ(blob, "xyz");
  EXPECT_EQ(ints, (std::vector<int64_t>{5, 7}));
  EXPECT_EQ(dims, (std::vector<int64_t>{9}));
  EXPECT_TRUE(r.done());
  EXPECT_TRUE(r.ExpectEnd().ok());
}

TEST(BytesTest, U16IsLittleEndian) {
  ByteWriter w;
  w.U16(0x0102);
  EXPECT_EQ(w.str(), Bytes({2, 1}));
  ByteReader r(w.str(), "u16");
  uint16_t v = 0;
  ASSERT_TRUE(r.U16(&v).ok());
  EXPECT_EQ(v, 0x0102);
  ByteReader short_input(Bytes({7}), "u16");
  ExpectDataLoss(short_input.U16(&v), "u16");
}

TEST(BytesTest, EmptyStringsAndShapesRoundTrip) {
  ByteWriter w;
  w.Str("");
  w.Blob("");
  w.Ints({});
  EXPECT_EQ(w.str(), std::string(4 + 8 + 1, '\0'));
  ByteReader r(w.str(), "empty");
  std::string s = "x", blob = "y";
  std::vector<int64_t> v{1};
  ASSERT_TRUE(r.Str(&s).ok());
  ASSERT_TRUE(r.Blob(&blob).ok());
  ASSERT_TRUE(r.Ints(&v).ok());
  EXPECT_TRUE(s.empty() && blob.empty() && v.empty());
  EXPECT_TRUE(r.done());
}

TEST(BytesTest, TruncatedInteger) {
  const std::string in = Bytes({1, 2, 3});
  ByteReader r(in, "ints of rank 2");
  uint32_t v;
  ExpectDataLoss(r.U32(&v), "ints of rank 2: truncated at byte 0 (need 4 more, 3 left)");
  EXPECT_EQ(r.pos(), 0u) << "a failed read consumes nothing";
}

TEST(BytesTest, TruncatedCount) {
  const std::string in = Bytes({1, 0, 0, 0});
  ByteReader r(in, "counts");
  uint64_t n;
  ExpectDataLoss(r.Count(&n, 8), "counts: truncated at byte 0 (need 8 more, 4 left)");
}

TEST(BytesTest, CountBeyondBuffer) {
  // 3 items of at least 8 bytes each need 24 bytes; 16 are left.
  ByteWriter w;
  w.U64(3);
  w.Raw(std::string(16, 'x').data(), 16);
  ByteReader r(w.str(), "sums");
  uint64_t n;
  ExpectDataLoss(r.Count(&n, 8), "sums: count 3 at byte 0 exceeds the 16 bytes left");
  ByteReader five(w.str(), "sums");
  EXPECT_TRUE(five.Count(&n, 5).ok()) << "3 items of 5 bytes fit in 16";
  EXPECT_EQ(n, 3u);
}

TEST(BytesTest, HugeCountIsRejectedBeforeAnyAllocation) {
  ByteWriter w;
  w.U64(UINT64_MAX);
  ByteReader r(w.str(), "pieces");
  uint64_t n;
  ExpectDataLoss(r.Count(&n, 1), "count 18446744073709551615 at byte 0 exceeds the 0 bytes left");
}

TEST(BytesTest, TruncatedStringLength) {
  const std::string in = Bytes({5, 0});
  ByteReader r(in, "key");
  std::string s;
  ExpectDataLoss(r.Str(&s), "key: truncated at byte 0 (need 4 more, 2 left)");
}

TEST(BytesTest, StringLengthBeyondBuffer) {
  const std::string in = Bytes({5, 0, 0, 0}) + "abc";
  ByteReader r(in, "file name");
  std::string s;
  ExpectDataLoss(r.Str(&s), "file name: length 5 at byte 4 exceeds the 3 bytes left");
  EXPECT_TRUE(s.empty());
}

TEST(BytesTest, BlobLengthBeyondBufferIn64Bits) {
  // A length above 4 GiB is read whole (not cut to 32 bits) and refused.
  ByteWriter w;
  w.U64((uint64_t{1} << 32) + 2);
  w.Raw("ab", 2);
  ByteReader r(w.str(), "metadata");
  std::string s;
  ExpectDataLoss(r.Blob(&s), "metadata: length 4294967298 at byte 8 exceeds the 2 bytes left");
}

TEST(BytesTest, RankAboveMax) {
  ByteWriter w;
  w.U8(static_cast<uint8_t>(kMaxRank + 1));
  w.Raw(std::string(8 * (kMaxRank + 1), '\0').data(), 8 * (kMaxRank + 1));
  ByteReader r(w.str(), "global shape");
  std::vector<int64_t> v;
  ExpectDataLoss(r.Ints(&v), "global shape: rank 33 at byte 0 exceeds 32");
}

TEST(BytesTest, TruncatedDims) {
  ByteWriter w;
  w.Ints({1, 2, 3});
  std::string cut = w.str().substr(0, w.str().size() - 1);
  ByteReader r(cut, "box");
  std::vector<int64_t> v;
  ExpectDataLoss(r.Ints(&v), "box: truncated at byte 1 (need 24 more, 23 left)");
}

TEST(BytesTest, TrailingBytesWhereNoneAreExpected) {
  ByteWriter w;
  w.U32(7);
  w.U8(0);
  ByteReader r(w.str(), "figures");
  uint32_t v;
  ASSERT_TRUE(r.U32(&v).ok());
  ExpectDataLoss(r.ExpectEnd(), "figures: 1 unexpected bytes at byte 4");
}

TEST(BytesTest, WriterRefusesRankAboveMax) {
  ByteWriter w;
  w.Ints(std::vector<int64_t>(kMaxRank + 1, 1));
  w.Ints(std::vector<int64_t>(kMaxRank + 2, 1));
  EXPECT_EQ(w.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(w.status().message().find("rank 33 exceeds the largest rank 32"), std::string::npos)
      << w.status().message() << " (the first error is kept)";
  EXPECT_TRUE(w.str().empty()) << "nothing written for the refused shape";
}

TEST(BytesTest, WriterRefusesStringLongerThanItsLengthPrefix) {
  // 4 GiB + 1 of address space, reserved and never touched.
  const size_t n = size_t{UINT32_MAX} + 2;
  void* p = mmap(nullptr, n, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  ByteWriter w;
  w.Str(std::string_view(static_cast<const char*>(p), n));
  munmap(p, n);
  EXPECT_EQ(w.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(w.status().message().find("a string of 4294967297 bytes exceeds the encodable "
                                      "4294967295 (32-bit length)"),
            std::string::npos)
      << w.status().message();
  EXPECT_TRUE(w.str().empty());
}

}  // namespace
}  // namespace shardpoint::internal_base
