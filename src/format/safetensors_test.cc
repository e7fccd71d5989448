#include "src/format/safetensors.h"

#include <gtest/gtest.h>

#include <random>

namespace shardpoint::internal_format {
namespace {

const std::string kFile = "data/0.safetensors";

SafetensorsEntry Entry(std::string name, DType dtype, Shape shape, uint64_t begin, uint64_t end) {
  SafetensorsEntry e;
  e.name = std::move(name);
  e.dtype = dtype;
  e.shape = std::move(shape);
  e.begin = begin;
  e.end = end;
  return e;
}

// Decodes a whole file image: length, then header.
Result<SafetensorsHeader> DecodeFile(std::string_view file) {
  SP_ASSIGN_OR_RETURN(uint64_t n,
                      DecodeSafetensorsHeaderLength(file.substr(0, 8), file.size(), kFile));
  return DecodeSafetensorsHeader(file.substr(8, n), file.size(), kFile);
}

// A file image with the given raw JSON header and `data_size` zero bytes.
std::string RawFile(const std::string& json, uint64_t data_size) {
  std::string out(8, '\0');
  uint64_t n = json.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(n >> (8 * i));
  return out + json + std::string(data_size, '\0');
}

template <typename T>
void ExpectDataLoss(const Result<T>& r, const std::string& substr) {
  ASSERT_FALSE(r.ok()) << "expected error containing: " << substr;
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss) << r.status().ToString();
  EXPECT_NE(r.status().message().find(substr), std::string::npos) << r.status().ToString();
  EXPECT_NE(r.status().message().find(kFile), std::string::npos) << r.status().ToString();
}

void ExpectDataLossJson(const std::string& json, uint64_t data_size, const std::string& substr) {
  SCOPED_TRACE(json);
  ExpectDataLoss(DecodeFile(RawFile(json, data_size)), substr);
}

TEST(Safetensors, RoundTripAligned) {
  std::vector<SafetensorsEntry> entries = {
      Entry("b@0", DType::kF32, {2, 3}, 0, 24),
      Entry("a@0", DType::kBF16, {4}, 24, 32),
      Entry("empty", DType::kI64, {0, 5}, 32, 32),
      Entry("scalar", DType::kF64, {}, 32, 40),
      Entry("quo\"te\\ctl\x01", DType::kF8E4M3, {3}, 40, 43),
  };
  std::map<std::string, std::string> md = {{"format", "pt"}, {"k", "v\n"}};
  for (size_t align : {1u, 8u, 64u, 4096u}) {
    std::string header = EncodeSafetensorsHeader(entries, md, align);
    EXPECT_EQ(header.size() % align, 0u);
    std::string file = header + std::string(43, 'x');
    Result<SafetensorsHeader> r = DecodeFile(file);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->data_start, header.size());
    EXPECT_EQ(r->metadata, md);
    ASSERT_EQ(r->entries.size(), entries.size());
    // Sorted by (begin, end, name): "empty" (32,32) before "scalar" (32,40).
    const char* want[] = {"b@0", "a@0", "empty", "scalar", "quo\"te\\ctl\x01"};
    for (size_t i = 0; i < entries.size(); ++i) {
      EXPECT_EQ(r->entries[i].name, want[i]);
    }
    EXPECT_EQ(r->entries[0].dtype, DType::kF32);
    EXPECT_EQ(r->entries[0].shape, (Shape{2, 3}));
    EXPECT_EQ(r->entries[4].dtype, DType::kF8E4M3);
    EXPECT_EQ(r->entries[3].shape, Shape{});
  }
}

TEST(Safetensors, EncodingIsCompactAndOrdered) {
  std::string h = EncodeSafetensorsHeader(
      {Entry("z", DType::kU8, {2}, 0, 2), Entry("a", DType::kBool, {}, 2, 3)}, {}, 1);
  EXPECT_EQ(h.substr(8), R"({"z":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},)"
                         R"("a":{"dtype":"BOOL","shape":[],"data_offsets":[2,3]}})");
  EXPECT_EQ(static_cast<unsigned char>(h[0]), h.size() - 8);
  // No "__metadata__" when empty; present and first otherwise.
  EXPECT_EQ(h.find("__metadata__"), std::string::npos);
  std::string m = EncodeSafetensorsHeader({}, {{"a", "b"}}, 1);
  EXPECT_EQ(m.substr(8), R"({"__metadata__":{"a":"b"}})");
}

TEST(Safetensors, PaddingIsSpaces) {
  std::string h = EncodeSafetensorsHeader({Entry("w", DType::kF32, {1}, 0, 4)}, {}, 4096);
  ASSERT_EQ(h.size(), 4096u);
  EXPECT_EQ(h.back(), ' ');
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(h[i]);
  EXPECT_EQ(n, 4096u - 8);
}

TEST(Safetensors, EmptyFile) {
  std::string file = EncodeSafetensorsHeader({}, {}, 8);
  Result<SafetensorsHeader> r = DecodeFile(file);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->entries.empty());
}

TEST(Safetensors, AllDTypeNames) {
  const char* names[] = {"BOOL", "U8",  "I8",   "I16", "U16", "I32",     "U32",    "I64",
                         "U64",  "F16", "BF16", "F32", "F64", "F8_E4M3", "F8_E5M2"};
  for (const char* n : names) {
    Result<DType> d = ParseDType(n);
    ASSERT_TRUE(d.ok());
    uint64_t size = DTypeSize(*d);
    std::string json = std::string(R"({"t":{"dtype":")") + n +
                       R"(","shape":[1],"data_offsets":[0,)" + std::to_string(size) + "]}}";
    Result<SafetensorsHeader> r = DecodeFile(RawFile(json, size));
    ASSERT_TRUE(r.ok()) << n << ": " << r.status().ToString();
    EXPECT_EQ(r->entries[0].dtype, *d);
  }
}

TEST(Safetensors, HeaderLengthErrors) {
  ExpectDataLoss(DecodeSafetensorsHeaderLength("", 0, kFile), "8-byte header length is missing");
  ExpectDataLoss(DecodeSafetensorsHeaderLength("1234567", 7, kFile),
                 "8-byte header length is missing");
  std::string big(8, '\0');
  big[4] = 1;  // 2^32
  ExpectDataLoss(DecodeSafetensorsHeaderLength(big, 1ull << 40, kFile), "exceeds the limit");
  std::string all_ff(8, '\xff');
  ExpectDataLoss(DecodeSafetensorsHeaderLength(all_ff, ~0ull, kFile), "exceeds the limit");
  std::string ten(8, '\0');
  ten[0] = 10;
  ExpectDataLoss(DecodeSafetensorsHeaderLength(ten, 17, kFile),
                 "header length 10 exceeds the file size 17");
  Result<uint64_t> ok = DecodeSafetensorsHeaderLength(ten, 18, kFile);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(*ok, 10u);
  ExpectDataLoss(DecodeSafetensorsHeader("{}", 9, kFile), "does not fit the file size");
}

TEST(Safetensors, ParseErrors) {
  ExpectDataLossJson("", 0, "header is not valid JSON");
  ExpectDataLossJson("{", 0, "header is not valid JSON");
  ExpectDataLossJson("\xff\xfe garbage", 0, "header is not valid JSON");
  ExpectDataLossJson(R"({"a":1} x)", 0, "header is not valid JSON");
  ExpectDataLossJson("[]", 0, "header JSON is not an object");
  ExpectDataLossJson("42", 0, "header JSON is not an object");
  ExpectDataLossJson("\"s\"", 0, "header JSON is not an object");
  ExpectDataLossJson(std::string(1000, '[') + std::string(1000, ']'), 0, "nests deeper");
  ExpectDataLossJson(R"({"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0]},)"
                     R"("a":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}})",
                     0, "duplicate name 'a'");
}

TEST(Safetensors, EntryErrors) {
  ExpectDataLossJson(R"({"t":[1]})", 0, "tensor 't': entry is not a JSON object");
  ExpectDataLossJson(R"({"t":{"shape":[1],"data_offsets":[0,1]}})", 1,
                     "tensor 't': missing or non-string \"dtype\"");
  ExpectDataLossJson(R"({"t":{"dtype":"F31","shape":[1],"data_offsets":[0,4]}})", 4,
                     "tensor 't': unknown dtype 'F31'");
  ExpectDataLossJson(R"({"t":{"dtype":"f32","shape":[1],"data_offsets":[0,4]}})", 4,
                     "unknown dtype 'f32'");
  ExpectDataLossJson(R"({"t":{"dtype":"F32","shape":1,"data_offsets":[0,4]}})", 4,
                     "missing or non-array \"shape\"");
  ExpectDataLossJson(R"({"t":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4,
                     "shape element -1 is not a non-negative int64");
  ExpectDataLossJson(R"({"t":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", 4,
                     "shape element 1.5");
  ExpectDataLossJson(R"({"t":{"dtype":"F32","shape":["2"],"data_offsets":[0,4]}})", 4,
                     "shape element \"2\"");
  ExpectDataLossJson(R"({"t":{"dtype":"F32","shape":[9223372036854775808],"data_offsets":[0,4]}})",
                     4, "is not a non-negative int64");
  ExpectDataLossJson(
      R"({"t":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}})", 4,
      "byte size of shape [4294967296, 4294967296] overflows");
  ExpectDataLossJson(R"({"t":{"dtype":"F64","shape":[2305843009213693952],"data_offsets":[0,4]}})",
                     4, "overflows");
  ExpectDataLossJson(R"({"t":{"dtype":"F32","shape":[1]}})", 4,
                     "\"data_offsets\" must be [begin, end]");
  ExpectDataLossJson(R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4,8]}})", 4,
                     "\"data_offsets\" must be [begin, end]");
  ExpectDataLossJson(R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[-1,3]}})", 4,
                     "\"data_offsets\" must be [begin, end]");
  ExpectDataLossJson(R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})", 8,
                     "tensor 't': data_offsets [8, 4) has begin > end");
  ExpectDataLossJson(R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 3,
                     "tensor 't': data_offsets [0, 4) out of bounds of the data region [0, 3)");
  ExpectDataLossJson(R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[0,18446744073709551615]}})",
                     4, "out of bounds");
  ExpectDataLossJson(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", 4,
                     "tensor 't': data_offsets [0, 4) hold 4 bytes, but F32 [2] needs 8");
}

TEST(Safetensors, MetadataErrors) {
  ExpectDataLossJson(R"({"__metadata__":[]})", 0, "\"__metadata__\" is not a JSON object");
  ExpectDataLossJson(R"({"__metadata__":{"a":1}})", 0,
                     "\"__metadata__\" value of 'a' is not a string");
}

TEST(Safetensors, CoverageErrors) {
  // Hole at the start, in the middle, and at the end.
  ExpectDataLossJson(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}})", 4,
                     "data region bytes [0, 2) are not covered by any tensor (hole before "
                     "tensor 'a')");
  ExpectDataLossJson(
      R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},)"
      R"("b":{"dtype":"U8","shape":[2],"data_offsets":[3,5]}})",
      5, "data region bytes [2, 3) are not covered by any tensor (hole before tensor 'b')");
  ExpectDataLossJson(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}})", 6,
                     "data region bytes [2, 6) are not covered by any tensor");
  ExpectDataLossJson(R"({})", 1, "data region bytes [0, 1) are not covered");
  // Overlaps: partial, identical, and an empty tensor inside another.
  ExpectDataLossJson(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                     R"("b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}})",
                     6, "tensor 'b' bytes [2, 6) overlap tensor 'a' bytes [0, 4)");
  ExpectDataLossJson(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                     R"("b":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}})",
                     4, "tensor 'b' bytes [0, 4) overlap tensor 'a' bytes [0, 4)");
  ExpectDataLossJson(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                     R"("e":{"dtype":"U8","shape":[0],"data_offsets":[2,2]}})",
                     4, "tensor 'e' bytes [2, 2) overlap tensor 'a' bytes [0, 4)");
}

TEST(Safetensors, EmptyEntriesAtBoundaries) {
  std::string json = R"({"e1":{"dtype":"U8","shape":[0],"data_offsets":[0,0]},)"
                     R"("a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                     R"("e2":{"dtype":"F32","shape":[3,0],"data_offsets":[4,4]},)"
                     R"("b":{"dtype":"U8","shape":[1],"data_offsets":[4,5]},)"
                     R"("e3":{"dtype":"U8","shape":[0],"data_offsets":[5,5]}})";
  Result<SafetensorsHeader> r = DecodeFile(RawFile(json, 5));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->entries.size(), 5u);
  EXPECT_EQ(r->entries[0].name, "e1");
  EXPECT_EQ(r->entries[1].name, "a");
  EXPECT_EQ(r->entries[2].name, "e2");
  EXPECT_EQ(r->entries[3].name, "b");
  EXPECT_EQ(r->entries[4].name, "e3");
}

TEST(Safetensors, UnknownFieldsAreIgnored) {
  // As the reference implementation: extra fields in an entry are not an error.
  Result<SafetensorsHeader> r =
      DecodeFile(RawFile(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"x":[[]]}})", 1));
  EXPECT_TRUE(r.ok()) << r.status().ToString();
}

// Nothing but JSON whitespace (space, tab, CR, LF) may follow the JSON
// object, and nothing precede it: the parser would otherwise stop at a NUL and
// ignore what follows.
TEST(Safetensors, OnlyJsonWhitespaceMayFollowTheJsonObject) {
  const std::string w = R"("w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]})";
  ASSERT_TRUE(DecodeFile(RawFile("{" + w + "}     ", 1)).ok());
  for (const std::string tail : {"\n", "\t ", "\r\n", " \r \t\n  "}) {
    SCOPED_TRACE(tail);
    Result<SafetensorsHeader> r = DecodeFile(RawFile("{" + w + "}" + tail, 1));
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_EQ(r->entries.size(), 1u);
    EXPECT_EQ(r->data_start, 8 + w.size() + 2 + tail.size());
  }
  ExpectDataLossJson("{" + w + std::string("}\0{\"garbage\":", 14), 1,
                     "header holds a NUL byte at byte " + std::to_string(8 + w.size() + 2));
  ExpectDataLossJson("{" + w + std::string("}  \0  ", 6), 1, "NUL byte");
  ExpectDataLossJson("{" + w + std::string("}\n\0", 3), 1, "NUL byte");
  ExpectDataLossJson("{" + w + "}x", 1, "header is not valid JSON");
  // Whitespace outside JSON's four: vertical tab, form feed, NBSP, U+2028.
  for (const std::string tail : {"\v", "\f", "\xC2\xA0", " \xE2\x80\xA8"}) {
    ExpectDataLossJson("{" + w + "}" + tail, 1, "header is not valid JSON");
  }
  ExpectDataLossJson("\xEF\xBB\xBF{" + w + "}", 1, "UTF-8 byte-order mark");
  ExpectDataLossJson(" {" + w + "}", 1, "does not start with '{'");
  ExpectDataLossJson("\n{" + w + "}", 1, "does not start with '{'");
}

// The vectors of upstream safetensors' tests, as their tests describe them:
// an empty header padded with CR, space, tab, LF reads (test_whitespace_padded_
// header); whitespace before the '{' is refused (upstream reserves that
// rejection; the format says the header starts with '{').
TEST(Safetensors, UpstreamWhitespaceVectors) {
  Result<SafetensorsHeader> r = DecodeFile(RawFile("{}\r \t\n", 0));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->entries.empty());
  EXPECT_EQ(r->data_start, 14u);
  ExpectDataLossJson("\t\n{}\r ", 0, "does not start with '{'");
  ExpectDataLossJson("{}\r \t\n\x0B", 0, "header is not valid JSON");
}

TEST(Safetensors, FuzzMutationsNeverCrash) {
  std::vector<SafetensorsEntry> entries = {Entry("w@0", DType::kF32, {2, 2}, 0, 16),
                                           Entry("w@1", DType::kBF16, {2}, 16, 20),
                                           Entry("z", DType::kU8, {0}, 20, 20)};
  const std::string base = EncodeSafetensorsHeader(entries, {{"k", "v"}}, 8) + std::string(20, 'd');
  ASSERT_TRUE(DecodeFile(base).ok());
  std::mt19937_64 rng(12345);
  int ok_count = 0;
  for (int iter = 0; iter < 5000; ++iter) {
    std::string f = base;
    int edits = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < edits; ++k) {
      switch (rng() % 4) {
        case 0:  // flip a byte
          if (!f.empty()) f[rng() % f.size()] = static_cast<char>(rng());
          break;
        case 1:  // truncate
          f.resize(rng() % (f.size() + 1));
          break;
        case 2:  // a JSON-ish character somewhere
          if (!f.empty()) f[rng() % f.size()] = "{}[]\",:-019eE."[rng() % 14];
          break;
        case 3:  // insert a byte
          f.insert(f.begin() + static_cast<std::ptrdiff_t>(rng() % (f.size() + 1)),
                   static_cast<char>(rng()));
          break;
      }
    }
    Result<SafetensorsHeader> r = DecodeFile(f);
    if (r.ok()) {
      ++ok_count;
    } else {
      EXPECT_EQ(r.status().code(), StatusCode::kDataLoss) << r.status().ToString();
    }
  }
  SUCCEED() << ok_count << " mutations still decoded";
}

}  // namespace
}  // namespace shardpoint::internal_format
