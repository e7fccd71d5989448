#include "src/dcp/byte_item_writer.h"

#include <gtest/gtest.h>

#include <cstring>

#include "src/dcp/zip.h"

namespace shardpoint::internal_dcp {
namespace {

std::string P(std::string_view body) {
  return std::string("\x80\x02", 2) + std::string(body) + ".";
}

std::string Le32(uint32_t v) {
  std::string s(4, '\0');
  std::memcpy(s.data(), &v, 4);
  return s;
}

// The pickles of JSON values, opcode by opcode as Python's pickle (protocol 2)
// writes the same values: json.loads(text) then pickle.dumps, less the memo.
TEST(DcpByteItemTest, PicklesJsonValuesAsPythonValues) {
  EXPECT_EQ(*PickleJson("null"), P("N"));
  EXPECT_EQ(*PickleJson(" true "), P("\x88"));
  EXPECT_EQ(*PickleJson("false"), P("\x89"));
  EXPECT_EQ(*PickleJson("7"), P("K\x07"));
  EXPECT_EQ(*PickleJson("-1"), P("J" + Le32(0xFFFFFFFF)));
  // 2**64: LONG1 of 10 little-endian bytes (one spare for the sign).
  EXPECT_EQ(*PickleJson("18446744073709551616"),
            P(std::string("\x8a\x0a\0\0\0\0\0\0\0\0\x01\0", 12)));
  // -2**64 - 1
  EXPECT_EQ(*PickleJson("-18446744073709551617"),
            P(std::string("\x8a\x0a\xff\xff\xff\xff\xff\xff\xff\xff\xfe\xff", 12)));
  // 1.5 as BINFLOAT, big-endian.
  EXPECT_EQ(*PickleJson("1.5"), P(std::string("G\x3f\xf8\0\0\0\0\0\0", 9)));
  EXPECT_EQ(*PickleJson("-Infinity"), P(std::string("G\xff\xf0\0\0\0\0\0\0", 9)));
  EXPECT_EQ(*PickleJson("NaN"), P(std::string("G\x7f\xf8\0\0\0\0\0\0", 9)));
  EXPECT_EQ(*PickleJson("1e400"), P(std::string("G\x7f\xf0\0\0\0\0\0\0", 9)));
  EXPECT_EQ(*PickleJson("-1e-400"), P(std::string("G\x80\0\0\0\0\0\0\0", 9)));
  EXPECT_EQ(*PickleJson("1" + std::string(400, '0') + "e-10"),
            P(std::string("G\x7f\xf0\0\0\0\0\0\0", 9)));
  // Escapes and a surrogate pair become UTF-8.
  EXPECT_EQ(*PickleJson(R"("a\n\u00e9\ud83d\ude00")"),
            P("X" + Le32(8) + "a\n\xc3\xa9\xf0\x9f\x98\x80"));
  EXPECT_EQ(*PickleJson("[]"), P("]"));
  EXPECT_EQ(*PickleJson("[1,[\"x\"]]"), P("](K\x01](X" + Le32(1) + "xee"));
  EXPECT_EQ(*PickleJson("{\"k\": null, \"k\": 2}"),
            P("}(X" + Le32(1) + "kNX" + Le32(1) + "kK\x02u"));
}

TEST(DcpByteItemTest, RefusesWhatJsonLoadsRefuses) {
  for (const std::string& bad : std::vector<std::string>{
           "", "{", "[1,]", "{\"a\":1,}", "01", "1.", "-", "tru", "\"\x01\"", "\"\\x\"",
           "\"\\ud800\"", "\"\\udc00x\"", "\"\xc3\"", "\"\xed\xa0\x80\"", "[1] 2", "{1:2}", "nan",
           std::string(600, '[') + std::string(600, ']'), std::string(4301, '9')}) {
    SCOPED_TRACE(bad.substr(0, 20));
    Result<std::string> r = PickleJson(bad);
    EXPECT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().ToString();
  }
  EXPECT_TRUE(PickleJson(std::string(4300, '9')).ok());
  EXPECT_TRUE(PickleJson(std::string(500, '[') + std::string(500, ']')).ok());
}

// The archive torch.load reads: archive/data.pkl and archive/version, CRCs
// right, each entry 64-byte aligned.
TEST(DcpByteItemTest, TorchSaveArchiveHoldsThePickleAndTheVersion) {
  const std::string pkl = P("N");
  const std::string a = TorchSaveArchive(pkl);
  ZipReadAt read = [&a](uint64_t off, size_t n, char* dst) -> Status {
    if (off > a.size() || n > a.size() - off) return DataLossError("past the end");
    std::memcpy(dst, a.data() + off, n);
    return OkStatus();
  };
  Result<std::vector<ZipEntry>> entries = ReadZipDirectory(a.size(), read, "item");
  ASSERT_TRUE(entries.ok()) << entries.status().ToString();
  ASSERT_EQ(entries->size(), 2u);
  EXPECT_EQ((*entries)[0].name, "archive/data.pkl");
  EXPECT_EQ(a.substr((*entries)[0].data_offset, (*entries)[0].size), pkl);
  EXPECT_EQ((*entries)[0].crc32, Crc32(0, pkl.data(), pkl.size()));
  EXPECT_EQ((*entries)[1].name, "archive/version");
  EXPECT_EQ(a.substr((*entries)[1].data_offset, (*entries)[1].size), "3\n");
  for (const ZipEntry& e : *entries) EXPECT_EQ(e.data_offset % 64, 0u);
}

std::string DataPkl(const std::string& item) {
  ZipReadAt read = [&item](uint64_t off, size_t n, char* dst) -> Status {
    std::memcpy(dst, item.data() + off, n);
    return OkStatus();
  };
  std::vector<ZipEntry> e = *ReadZipDirectory(item.size(), read, "item");
  return item.substr(e[0].data_offset, e[0].size);
}

TEST(DcpByteItemTest, EncodesEachTagAndKeepsDcpItems) {
  const std::string json = "J{\"a\":[1,2.5]}";
  EXPECT_EQ(DataPkl(*EncodeDcpByteItem(json, ObjectSource::kShardpoint, "k")),
            *PickleJson(json.substr(1)));
  // bytes: _codecs.encode(<latin-1 str>, 'latin1'), as torch.save pickles them.
  const std::string b = std::string("B\x00\xff", 3);
  EXPECT_EQ(DataPkl(*EncodeDcpByteItem(b, ObjectSource::kShardpoint, "k")),
            P("c_codecs\nencode\n(X" + Le32(3) + std::string("\x00\xc3\xbf", 3) + "X" + Le32(6) +
              "latin1tR"));
  // No tag of the Python package: the stored bytes, as bytes.
  EXPECT_EQ(DataPkl(*EncodeDcpByteItem("xy", ObjectSource::kShardpoint, "k")),
            P("c_codecs\nencode\n(X" + Le32(2) + "xyX" + Le32(6) + "latin1tR"));
  // A pickle is kept as it is.
  EXPECT_EQ(DataPkl(*EncodeDcpByteItem("P" + P("N"), ObjectSource::kShardpoint, "k")), P("N"));
  // A DCP byte item is a torch.save archive already.
  EXPECT_EQ(*EncodeDcpByteItem("J{bad", ObjectSource::kDcp, "k"), "J{bad");
  Result<std::string> bad = EncodeDcpByteItem("J{bad", ObjectSource::kShardpoint, "opt.cfg");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(bad.status().message().find("object 'opt.cfg'"), std::string::npos)
      << bad.status().ToString();
}

}  // namespace
}  // namespace shardpoint::internal_dcp
