// Safetensors files and HF directories from untrusted bytes: every malformed
// input is a DataLoss naming the file (and tensor / byte range), never a crash.
#include <gtest/gtest.h>

#include <random>

#include "src/format/safetensors.h"
#include "src/source/hf_dir.h"
#include "tests/hf/hf_model.h"

using shardpoint::internal_format::AssignSafetensorsOffsets;
using shardpoint::internal_format::DecodeSafetensorsHeader;
using shardpoint::internal_format::DecodeSafetensorsHeaderLength;
using shardpoint::internal_format::EncodeSafetensorsHeader;
using shardpoint::internal_format::SafetensorsEntry;
using shardpoint::internal_format::SafetensorsHeader;
using shardpoint::internal_source::HfDirIndex;
using shardpoint::internal_source::ScanHfDir;

namespace shardpoint {
namespace {

using namespace hftest;

std::string RawFile(const std::string& json, uint64_t data_size, uint64_t len_override = 0) {
  std::string out(8, '\0');
  uint64_t n = len_override ? len_override : json.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(n >> (8 * i));
  return out + json + std::string(data_size, '\0');
}

// The header of an open file, read as the HF reader and verify read it: the
// 8-byte length, then the JSON (a short file is never a crash).
Result<SafetensorsHeader> ReadHeader(const ReadableFile& file, const std::string& name) {
  SP_ASSIGN_OR_RETURN(uint64_t size, file.Size());
  char first8[8] = {};
  if (size >= 8) SP_RETURN_IF_ERROR(file.ReadAt(0, 8, first8));
  SP_ASSIGN_OR_RETURN(uint64_t n, DecodeSafetensorsHeaderLength(
                                      std::string_view(first8, size >= 8 ? 8 : 0), size, name));
  std::string json(n, '\0');
  SP_RETURN_IF_ERROR(file.ReadAt(8, n, json.data()));
  return DecodeSafetensorsHeader(json, size, name);
}

Result<SafetensorsHeader> ReadImage(Storage* s, const std::string& bytes) {
  EXPECT_TRUE(s->CreateDirs("m").ok());
  EXPECT_TRUE(s->WriteStringToFile("m/x.safetensors", bytes).ok());
  Result<std::unique_ptr<ReadableFile>> f = s->NewReadableFile("m/x.safetensors");
  if (!f.ok()) return f.status();
  return ReadHeader(**f, "m/x.safetensors");
}

void ExpectError(const Result<SafetensorsHeader>& r, const std::string& substr) {
  ASSERT_FALSE(r.ok()) << "expected: " << substr;
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss) << r.status().ToString();
  EXPECT_NE(r.status().message().find(substr), std::string::npos) << r.status().ToString();
  EXPECT_NE(r.status().message().find("m/x.safetensors"), std::string::npos);
}

// A valid image with every dtype, an empty tensor, a scalar and metadata.
std::string ValidImage() {
  std::vector<SafetensorsEntry> e;
  for (int d = 0; d < kNumDTypes; ++d) {
    e.push_back({"t" + std::to_string(d), static_cast<DType>(d), {2, 3}, 0, 0});
  }
  e.push_back({"empty", DType::kBF16, {0, 7}, 0, 0});
  e.push_back({"scalar", DType::kF8E5M2, {}, 0, 0});
  const uint64_t n = AssignSafetensorsOffsets(&e);
  std::string img = EncodeSafetensorsHeader(e, {{"format", "pt"}}, 8);
  for (uint64_t i = 0; i < n; ++i) img.push_back(static_cast<char>(i * 7));
  return img;
}

TEST(HfSafetensorsFile, ValidFileAllDTypes) {
  auto s = NewMemStorage();
  Result<SafetensorsHeader> h = ReadImage(s.get(), ValidImage());
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(h->entries.size(), static_cast<size_t>(kNumDTypes) + 2);
  EXPECT_EQ(h->metadata.at("format"), "pt");
  bool e4m3 = false, e5m2 = false;
  for (const auto& e : h->entries) {
    e4m3 |= e.dtype == DType::kF8E4M3;
    e5m2 |= e.dtype == DType::kF8E5M2 && e.shape.empty();
  }
  EXPECT_TRUE(e4m3 && e5m2);
}

TEST(HfSafetensorsFile, MalformedHeaders) {
  auto s = NewMemStorage();
  const std::string ok = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  ExpectError(ReadImage(s.get(), "abc"), "truncated");
  ExpectError(ReadImage(s.get(), RawFile(ok, 8, uint64_t{1} << 40)), "exceeds the limit");
  ExpectError(ReadImage(s.get(), RawFile(ok, 8, 100'000'000 + 1)), "exceeds the limit");
  ExpectError(ReadImage(s.get(), RawFile(ok, 8, ok.size() + 100)), "exceeds the file size");
  ExpectError(ReadImage(s.get(), RawFile("{\"a\":", 0)), "not valid JSON");
  ExpectError(
      ReadImage(s.get(), RawFile(R"({"a":{"dtype":"F31","shape":[2],"data_offsets":[0,8]}})", 8)),
      "unknown dtype 'F31'");
  ExpectError(
      ReadImage(s.get(), RawFile(R"({"a":{"dtype":"f32","shape":[2],"data_offsets":[0,8]}})", 8)),
      "unknown dtype 'f32'");
  ExpectError(ReadImage(s.get(), RawFile(ok, 4)), "out of bounds");
  ExpectError(ReadImage(s.get(), RawFile(ok, 12)), "not covered");
  ExpectError(
      ReadImage(s.get(), RawFile(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                 R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                                 12)),
      "overlap tensor 'a'");
  ExpectError(
      ReadImage(s.get(), RawFile(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12)),
      "hole before tensor 'a'");
  ExpectError(
      ReadImage(s.get(), RawFile(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8)),
      "needs 12");
  ExpectError(
      ReadImage(s.get(), RawFile(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,8]}})", 8)),
      "shape element");
  ExpectError(ReadImage(s.get(), RawFile(R"({"__metadata__":{"k":1}})", 0)), "__metadata__");
}

// Fuzz-ish: every truncation and random byte flips of a valid image are
// either accepted or a DataLoss, never a crash.
TEST(HfSafetensorsFile, TruncationsAndFlips) {
  auto s = NewMemStorage();
  const std::string img = ValidImage();
  for (size_t n = 0; n < img.size(); ++n) {
    Result<SafetensorsHeader> h = ReadImage(s.get(), img.substr(0, n));
    ASSERT_FALSE(h.ok()) << "truncated to " << n;
    EXPECT_EQ(h.status().code(), StatusCode::kDataLoss);
  }
  std::mt19937 rng(7);
  const size_t header_end =
      8 + (static_cast<unsigned char>(img[0]) | (static_cast<unsigned char>(img[1]) << 8));
  for (int i = 0; i < 2000; ++i) {
    std::string bad = img;
    for (int k = 0; k < 1 + i % 3; ++k) bad[rng() % header_end] = static_cast<char>(rng());
    Result<SafetensorsHeader> h = ReadImage(s.get(), bad);
    if (!h.ok()) {
      EXPECT_EQ(h.status().code(), StatusCode::kDataLoss) << h.status().ToString();
    }
  }
}

TEST(HfDir, IndexAndFilesMustAgree) {
  auto s = NewMemStorage();
  HfWriteOptions o;
  o.storage = s.get();
  o.max_shard_size = 10;
  std::vector<HfTensor> ts = {RandomTensor("a", {4}), RandomTensor("b", {4}),
                              RandomTensor("c", {})};
  ASSERT_TRUE(WriteHfModel("m", ts, o).ok());
  Result<HfDirIndex> idx = ScanHfDir(s.get(), "m");
  ASSERT_TRUE(idx.ok()) << idx.status().ToString();
  EXPECT_EQ(idx->files.size(), 3u);
  // The index names the wrong file for a tensor.
  std::string index = *s->ReadFileToString("m/model.safetensors.index.json");
  std::string bad = index;
  bad.replace(bad.find("model-00001"), 11, "model-00002");
  ASSERT_TRUE(s->WriteStringToFile("m/model.safetensors.index.json", bad).ok());
  idx = ScanHfDir(s.get(), "m");
  ASSERT_FALSE(idx.ok());
  EXPECT_NE(idx.status().message().find("index"), std::string::npos) << idx.status().ToString();
  // A file name escaping the directory.
  bad = index;
  bad.replace(bad.find("model-00001-of-00003.safetensors"), 32, "../x.safetensors");
  ASSERT_TRUE(s->WriteStringToFile("m/model.safetensors.index.json", bad).ok());
  EXPECT_FALSE(ScanHfDir(s.get(), "m").ok());
  ASSERT_TRUE(s->WriteStringToFile("m/model.safetensors.index.json", "{not json").ok());
  idx = ScanHfDir(s.get(), "m");
  ASSERT_FALSE(idx.ok());
  EXPECT_EQ(idx.status().code(), StatusCode::kDataLoss);
}

}  // namespace
}  // namespace shardpoint
