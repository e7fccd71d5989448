#include "src/format/manifest.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <nlohmann/json.hpp>
#include <random>

#include "src/format/checksum.h"

namespace shardpoint::internal_format {
namespace {

const std::string kName = "/ckpt/step_10/manifest";

bool SameChunk(const ChunkRecord& a, const ChunkRecord& b) {
  return a.box == b.box && a.file == b.file && a.offset == b.offset && a.nbytes == b.nbytes &&
         a.checksum == b.checksum && a.block_sums == b.block_sums;
}

bool SameManifest(const Manifest& a, const Manifest& b) {
  if (a.version != b.version || a.block_size != b.block_size || a.files != b.files ||
      a.has_common != b.has_common || a.common != b.common || a.metadata_json != b.metadata_json ||
      a.tensors.size() != b.tensors.size() || a.objects.size() != b.objects.size()) {
    return false;
  }
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    const TensorRecord& x = a.tensors[i];
    const TensorRecord& y = b.tensors[i];
    if (x.key != y.key || x.dtype != y.dtype || x.shape != y.shape ||
        x.chunks.size() != y.chunks.size()) {
      return false;
    }
    for (size_t c = 0; c < x.chunks.size(); ++c) {
      if (!SameChunk(x.chunks[c], y.chunks[c])) return false;
    }
  }
  for (size_t i = 0; i < a.objects.size(); ++i) {
    const ObjectRecord& x = a.objects[i];
    const ObjectRecord& y = b.objects[i];
    if (x.key != y.key || x.index != y.index || x.grid != y.grid || x.file != y.file ||
        x.offset != y.offset || x.nbytes != y.nbytes || x.checksum != y.checksum) {
      return false;
    }
  }
  return true;
}

ChunkRecord Chunk(Box box, uint32_t file, uint64_t offset, uint64_t nbytes, uint64_t sum) {
  ChunkRecord c;
  c.box = std::move(box);
  c.file = file;
  c.offset = offset;
  c.nbytes = nbytes;
  c.checksum = sum;
  return c;
}

ObjectRecord Object(std::string key, Shape index, Shape grid, uint32_t file, uint64_t offset,
                    uint64_t nbytes) {
  ObjectRecord o;
  o.key = std::move(key);
  o.index = std::move(index);
  o.grid = std::move(grid);
  o.file = file;
  o.offset = offset;
  o.nbytes = nbytes;
  o.checksum = 0xfeedface;
  return o;
}

// Two files, three tensors (one 0-d, one with an empty chunk), two objects.
Manifest Small() {
  Manifest m;
  m.files = {"data/0.safetensors", "data/1.safetensors"};
  TensorRecord a{"layer.0.weight", DType::kBF16, {4, 6}, {}};
  a.chunks.push_back(Chunk(Box({0, 0}, {2, 6}), 0, 4096, 24, 0x1111));
  a.chunks.push_back(Chunk(Box({2, 0}, {2, 6}), 1, 4096, 24, 0x2222));
  a.chunks[1].block_sums = {0x2222};  // one block (the other chunk: verified whole)
  TensorRecord b{"layer.0.bias", DType::kF32, {0}, {}};
  b.chunks.push_back(Chunk(Box({0}, {0}), 0, 4120, 0, Checksum64("", 0)));
  TensorRecord s{"step", DType::kI64, {}, {}};
  s.chunks.push_back(Chunk(Box({}, {}), 1, 4120, 8, 0x3333));
  m.tensors = {b, a, s};  // sorted by key
  m.objects = {Object("rng", {0}, {2}, 0, 4120, 5), Object("rng", {1}, {2}, 1, 4128, 5),
               Object("sched", {}, {}, 0, 4125, 3)};
  m.has_common = true;
  m.common = std::string("iter\0=10", 8);
  m.metadata_json = R"({"step": 10, "note": "ok"})";
  return m;
}

// Recomputes the trailing checksum after an edit, so that the structure
// checks (not the checksum) see the edit.
void Reseal(std::string* bytes) {
  ASSERT_GE(bytes->size(), 8u);
  uint64_t sum = Checksum64(bytes->data(), bytes->size() - 8);
  std::memcpy(bytes->data() + bytes->size() - 8, &sum, 8);
}

template <typename T>
void PutLE(std::string* bytes, size_t at, T v) {
  std::memcpy(bytes->data() + at, &v, sizeof(T));
}

void ExpectDataLoss(std::string_view bytes, const std::string& substr) {
  Result<Manifest> r = DecodeManifest(bytes, kName);
  ASSERT_FALSE(r.ok()) << "expected error containing: " << substr;
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss) << r.status().ToString();
  EXPECT_NE(r.status().message().find(substr), std::string::npos) << r.status().ToString();
  EXPECT_NE(r.status().message().find(kName), std::string::npos) << r.status().ToString();
}

void ExpectInvalid(const Manifest& m, const std::string& substr) {
  SCOPED_TRACE(substr);
  ExpectDataLoss(EncodeManifest(m), substr);
}

TEST(Manifest, RoundTrip) {
  Manifest m = Small();
  std::string bytes = EncodeManifest(m);
  EXPECT_EQ(bytes.substr(0, 8), std::string("SHRDPNT\0", 8));
  Result<Manifest> r = DecodeManifest(bytes, kName);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(SameManifest(m, *r));
  EXPECT_EQ(EncodeManifest(*r), bytes) << "deterministic bytes";
}

TEST(Manifest, RoundTripVersion1) {
  // Version 1: no block size, no block checksums; decodes with block_size 0.
  Manifest m = Small();
  m.version = 1;
  m.block_size = 0;
  m.tensors[1].chunks[1].block_sums.clear();
  std::string bytes = EncodeManifest(m);
  EXPECT_EQ(bytes.size(), EncodeManifest(Small()).size() - 8 - 4 * 8 - 8);
  Result<Manifest> r = DecodeManifest(bytes, kName);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->version, 1u);
  EXPECT_TRUE(SameManifest(m, *r));
  EXPECT_EQ(EncodeManifest(*r), bytes);
  EXPECT_EQ(VerifyBlock(*r, r->tensors[1].chunks[1]), 24u);  // the whole chunk
  Manifest empty;
  empty.version = 1;
  EXPECT_EQ(EncodeManifest(empty).size(), 65u);
}

TEST(Manifest, BlockChecksums) {
  Manifest m = Small();
  m.block_size = 4096;
  TensorRecord big{"big", DType::kU8, {10000}, {}};
  big.chunks.push_back(Chunk(Box({0}, {10000}), 0, 8192, 10000, 7));
  big.chunks[0].block_sums = {1, 2, 3};  // 4096 + 4096 + 1808
  m.tensors.insert(m.tensors.begin(), big);
  Result<Manifest> r = DecodeManifest(EncodeManifest(m), kName);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(SameManifest(m, *r));
  EXPECT_EQ(VerifyBlock(*r, r->tensors[0].chunks[0]), 4096u);
  m.tensors[0].chunks[0].block_sums = {1, 2};
  ExpectInvalid(m, "tensor 'big' chunk 0 block checksum count 2 but its 10000 bytes make 3 blocks");
  m.tensors[0].chunks[0].block_sums = {1, 2, 3};
  for (uint64_t bad : {uint64_t{0}, uint64_t{4095}, uint64_t{6000}, uint64_t{2048}}) {
    m.block_size = bad;
    ExpectInvalid(m, "block size " + std::to_string(bad) + " is not a power of two >= 4096");
  }
}

TEST(Manifest, RoundTripEmpty) {
  Manifest m;
  std::string bytes = EncodeManifest(m);
  EXPECT_EQ(bytes.size(), 73u);
  Result<Manifest> r = DecodeManifest(bytes, kName);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(SameManifest(m, *r));
  EXPECT_FALSE(r->has_common);
}

TEST(Manifest, EmptyCommonIsDistinctFromNone) {
  Manifest m;
  m.has_common = true;
  Result<Manifest> r = DecodeManifest(EncodeManifest(m), kName);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->has_common);
  EXPECT_TRUE(r->common.empty());
}

TEST(Manifest, FindTensor) {
  Manifest m = Small();
  EXPECT_EQ(m.FindTensor("layer.0.bias"), 0);
  EXPECT_EQ(m.FindTensor("layer.0.weight"), 1);
  EXPECT_EQ(m.FindTensor("step"), 2);
  EXPECT_EQ(m.FindTensor("layer"), -1);
  EXPECT_EQ(m.FindTensor("zzz"), -1);
  EXPECT_EQ(m.FindTensor(""), -1);
  EXPECT_EQ(Manifest().FindTensor("a"), -1);
}

TEST(Manifest, PreambleErrors) {
  std::string bytes = EncodeManifest(Small());
  ExpectDataLoss("", "truncated: 0 bytes, a manifest has at least 65");
  ExpectDataLoss(std::string_view(bytes).substr(0, 15), "truncated: 15 bytes");
  ExpectDataLoss(std::string_view(bytes).substr(0, 64), "truncated: 64 bytes");
  std::string bad = bytes;
  bad[0] = 'X';
  ExpectDataLoss(bad, "bad magic");
  ExpectDataLoss(std::string(100, '\0'), "bad magic");
  bad = bytes;
  PutLE<uint32_t>(&bad, 8, 3);
  ExpectDataLoss(bad, "unsupported format version 3");
  Reseal(&bad);
  ExpectDataLoss(bad, "unsupported format version 3");
  bad = bytes;
  PutLE<uint32_t>(&bad, 12, 1);
  ExpectDataLoss(bad, "manifest checksum mismatch");
  Reseal(&bad);
  ExpectDataLoss(bad, "unsupported flags");
}

TEST(Manifest, EveryTruncationIsDataLoss) {
  std::string bytes = EncodeManifest(Small());
  for (size_t n = 0; n < bytes.size(); ++n) {
    Result<Manifest> r = DecodeManifest(std::string_view(bytes).substr(0, n), kName);
    ASSERT_FALSE(r.ok()) << n;
    EXPECT_EQ(r.status().code(), StatusCode::kDataLoss) << n;
  }
}

TEST(Manifest, EveryResealedTruncationIsDataLoss) {
  // Cut the body at every length and re-seal it: the structure checks must
  // catch what the checksum no longer does.
  std::string bytes = EncodeManifest(Small());
  for (size_t n = 16; n + 8 < bytes.size(); ++n) {
    std::string cut = bytes.substr(0, n) + std::string(8, '\0');
    Reseal(&cut);
    Result<Manifest> r = DecodeManifest(cut, kName);
    ASSERT_FALSE(r.ok()) << n;
    EXPECT_EQ(r.status().code(), StatusCode::kDataLoss) << n;
  }
}

TEST(Manifest, EveryBitFlipIsDataLoss) {
  std::string bytes = EncodeManifest(Small());
  for (size_t i = 0; i < bytes.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string f = bytes;
      f[i] = static_cast<char>(f[i] ^ (1 << bit));
      Result<Manifest> r = DecodeManifest(f, kName);
      ASSERT_FALSE(r.ok()) << i << ":" << bit;
      EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
      if (i >= 12) {
        EXPECT_NE(r.status().message().find("manifest checksum mismatch"), std::string::npos)
            << r.status().ToString();
      }
    }
  }
}

TEST(Manifest, CountErrors) {
  std::string bytes = EncodeManifest(Small());
  std::string bad = bytes;
  PutLE<uint64_t>(&bad, 24, ~0ull);  // file count, after the block size
  Reseal(&bad);
  ExpectDataLoss(bad, "file count 18446744073709551615 at byte 24 does not fit");
  // Tensor count: right after the two file names.
  size_t tensors_at = 32 + 2 * (4 + 18);
  bad = bytes;
  PutLE<uint64_t>(&bad, tensors_at, 1ull << 40);
  Reseal(&bad);
  ExpectDataLoss(bad, "tensor count 1099511627776 at byte 76 does not fit");
  // First tensor's chunk count: key "layer.0.bias", dtype, rank 1, shape.
  size_t chunks_at = tensors_at + 8 + 4 + 12 + 1 + 1 + 8;
  bad = bytes;
  PutLE<uint64_t>(&bad, chunks_at, 1000);
  Reseal(&bad);
  ExpectDataLoss(bad, "tensor 'layer.0.bias' chunk count 1000");
}

TEST(Manifest, TrailingBytesBeforeChecksum) {
  std::string bytes = EncodeManifest(Small());
  std::string bad = bytes.substr(0, bytes.size() - 8) + "xyz" + std::string(8, '\0');
  Reseal(&bad);
  ExpectDataLoss(bad, "3 unexpected bytes");
}

TEST(Manifest, CommonFlagErrors) {
  Manifest m;
  std::string bytes = EncodeManifest(m);
  std::string bad = bytes;
  bad[48] = 2;  // has_common (after the block size and three counts)
  Reseal(&bad);
  ExpectDataLoss(bad, "invalid common blob flag 2");
  // has_common = 0 with a non-empty blob.
  m.has_common = true;
  m.common = "abc";
  bad = EncodeManifest(m);
  bad[48] = 0;
  Reseal(&bad);
  ExpectDataLoss(bad, "invalid common blob flag 0");
}

TEST(Manifest, FileNameErrors) {
  for (const char* name :
       {"", "data/", "data/.", "data/..", "data/../x", "data/a..b", "data/a/b", "/data/0",
        "/etc/passwd", "0.safetensors", "Data/0", "data//x", "../data/0"}) {
    Manifest m;
    m.files = {name};
    ExpectInvalid(m, "is not of the form data/<name>");
  }
  Manifest m;
  m.files = {std::string("data/a\0b", 8)};
  ExpectInvalid(m, "is not of the form data/<name>");
  m.files = {"data/0", "data/1", "data/0"};
  ExpectInvalid(m, "file name 'data/0' listed twice");
}

TEST(Manifest, TensorErrors) {
  Manifest m = Small();
  m.tensors[0].dtype = static_cast<DType>(77);
  ExpectInvalid(m, "tensor 'layer.0.bias' has invalid dtype 77");

  m = Small();
  m.tensors[0].shape = Shape(33, 1);
  ExpectInvalid(m, "tensor 'layer.0.bias' has rank 33 > 32");

  m = Small();
  m.tensors[1].shape = {-4, 6};
  ExpectInvalid(m, "tensor 'layer.0.weight' has invalid shape [-4, 6]");

  m = Small();
  m.tensors[1].shape = {1ll << 40, 1ll << 40};
  ExpectInvalid(m, "invalid shape");

  m = Small();
  m.tensors[1].dtype = DType::kF64;
  m.tensors[1].shape = {1ll << 31, 1ll << 31};  // 2^62 elements * 8 bytes
  m.tensors[1].chunks.clear();
  ExpectInvalid(m, "invalid shape");

  m = Small();
  std::swap(m.tensors[0], m.tensors[1]);
  ExpectInvalid(m, "tensor 'layer.0.bias' is not after 'layer.0.weight'");

  m = Small();
  m.tensors[1].key = m.tensors[0].key;
  ExpectInvalid(m, "keys must be sorted and unique");
}

TEST(Manifest, ChunkErrors) {
  Manifest m = Small();
  m.tensors[1].chunks[1].box = Box({3, 0}, {2, 6});
  ExpectInvalid(m, "tensor 'layer.0.weight' chunk 1 (at byte");
  ExpectInvalid(m, "box [3:5, 0:6] lies outside shape [4, 6]");

  m = Small();
  m.tensors[1].chunks[0].box = Box({-1, 0}, {2, 6});
  ExpectInvalid(m, "lies outside shape");

  m = Small();
  m.tensors[1].chunks[0].box = Box({0, 0}, {-2, 6});
  ExpectInvalid(m, "lies outside shape");

  m = Small();
  m.tensors[1].chunks[0].box = Box({2, 0}, {INT64_MAX, 6});
  ExpectInvalid(m, "lies outside shape");

  m = Small();
  m.tensors[1].chunks[0].nbytes = 48;
  ExpectInvalid(m, "chunk 0 (at byte");
  ExpectInvalid(m, "nbytes 48 but box [0:2, 0:6] holds 24 bytes");

  m = Small();
  m.tensors[2].chunks[0].file = 2;
  ExpectInvalid(m, "tensor 'step' chunk 0");
  ExpectInvalid(m, "file index 2 but there are 2 files");

  m = Small();
  m.tensors[1].chunks[0].offset = UINT64_MAX - 10;
  ExpectInvalid(m, "byte range offset 18446744073709551605 + 24 overflows");

  m = Small();
  std::swap(m.tensors[1].chunks[0], m.tensors[1].chunks[1]);
  ExpectInvalid(m, "chunks must be sorted and unique");

  m = Small();
  m.tensors[1].chunks[1] = m.tensors[1].chunks[0];
  ExpectInvalid(m, "chunks must be sorted and unique");
}

TEST(Manifest, ObjectErrors) {
  Manifest m = Small();
  m.objects[0].index = Shape(40, 0);
  m.objects[0].grid = Shape(40, 1);
  ExpectInvalid(m, "object 'rng' index has rank 40 > 32");

  m = Small();
  m.objects[0].grid = {2, 1};
  ExpectInvalid(m, "object 'rng' index [0] has a different rank from its grid [2, 1]");

  m = Small();
  m.objects[1].index = {2};
  ExpectInvalid(m, "object 'rng' index [2] lies outside its grid [2]");

  m = Small();
  m.objects[0].index = {-1};
  ExpectInvalid(m, "lies outside its grid");

  m = Small();
  m.objects[2].file = 9;
  ExpectInvalid(m, "object 'sched' index [] has file index 9 but there are 2 files");

  m = Small();
  m.objects[2].offset = UINT64_MAX;
  ExpectInvalid(m, "object 'sched' index [] byte range offset 18446744073709551615 + 3 overflows");

  m = Small();
  std::swap(m.objects[0], m.objects[1]);
  ExpectInvalid(m, "object 'rng' index [0] is not after the previous object");

  m = Small();
  m.objects[1] = m.objects[0];
  ExpectInvalid(m, "objects must be sorted by (key, index) and unique");
}

TEST(Manifest, FuzzResealedMutationsNeverCrash) {
  const std::string base = EncodeManifest(Small());
  std::mt19937_64 rng(2024);
  int ok = 0;
  for (int iter = 0; iter < 5000; ++iter) {
    std::string f = base;
    int edits = 1 + static_cast<int>(rng() % 3);
    for (int k = 0; k < edits; ++k) {
      size_t at = 16 + rng() % (f.size() - 24);
      switch (rng() % 4) {
        case 0:
          f[at] = static_cast<char>(rng());
          break;
        case 1:
          f[at] = static_cast<char>(f[at] ^ (1 << (rng() % 8)));
          break;
        case 2:  // a small or huge value where a count or length may be
          f[at] = static_cast<char>(rng() % 2 ? 0xff : rng() % 40);
          break;
        case 3:
          f.erase(at, 1 + rng() % 8);
          f.resize(std::max<size_t>(f.size(), 24), '\0');
          break;
      }
    }
    Reseal(&f);
    Result<Manifest> r = DecodeManifest(f, kName);
    if (r.ok()) {
      ++ok;
      // Whatever decodes re-encodes to the same bytes.
      EXPECT_EQ(EncodeManifest(*r), f);
      (void)ManifestToJson(*r);
    } else {
      EXPECT_EQ(r.status().code(), StatusCode::kDataLoss) << r.status().ToString();
    }
  }
  std::printf("%d of 5000 mutated manifests still decoded\n", ok);
}

TEST(Manifest, RandomGarbage) {
  std::mt19937_64 rng(99);
  for (int iter = 0; iter < 2000; ++iter) {
    std::string g(rng() % 200, '\0');
    for (char& c : g) c = static_cast<char>(rng());
    if (iter % 2 && g.size() >= 16) {
      std::memcpy(g.data(), "SHRDPNT\0\1\0\0\0\0\0\0\0", 16);
      if (g.size() >= 65) Reseal(&g);
    }
    Result<Manifest> r = DecodeManifest(g, kName);
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
    }
  }
}

TEST(Manifest, ToJson) {
  Manifest m = Small();
  std::string text = ManifestToJson(m);
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(text);
  EXPECT_EQ(j["format"], "shardpoint");
  EXPECT_EQ(j["version"], 2);
  EXPECT_EQ(j["block_size"], kDefaultBlockSize);
  EXPECT_EQ(j["files"][1], "data/1.safetensors");
  auto keys = j.items().begin();
  EXPECT_EQ(keys.key(), "format");
  const auto& w = j["tensors"][1];
  EXPECT_EQ(w["key"], "layer.0.weight");
  EXPECT_EQ(w["dtype"], "BF16");
  EXPECT_EQ(w["shape"], nlohmann::json({4, 6}));
  EXPECT_EQ(w["chunks"][1]["offset"], nlohmann::json({2, 0}));
  EXPECT_EQ(w["chunks"][1]["file"], 1);
  EXPECT_EQ(w["chunks"][1]["byte_offset"], 4096);
  EXPECT_EQ(w["chunks"][1]["nbytes"], 24);
  EXPECT_EQ(w["chunks"][1]["checksum"], "0000000000002222");
  EXPECT_EQ(j["tensors"][2]["shape"], nlohmann::json::array());
  EXPECT_EQ(j["objects"][1]["index"], nlohmann::json({1}));
  EXPECT_EQ(j["objects"][2]["grid"], nlohmann::json::array());
  EXPECT_EQ(j["common"]["size"], 8);
  EXPECT_EQ(j["common"]["checksum"].get<std::string>().size(), 16u);
  EXPECT_EQ(j["metadata"]["step"], 10);

  m.metadata_json = "not json {";
  m.has_common = false;
  m.tensors[0].key = "bad\xff utf8";
  j = nlohmann::json::parse(ManifestToJson(m, -1));
  EXPECT_EQ(j["metadata"], "not json {");
  EXPECT_TRUE(j["common"].is_null());
  EXPECT_EQ(ManifestToJson(m, -1).find('\n'), std::string::npos);

  m.metadata_json = std::string(100000, '[') + std::string(100000, ']');
  j = nlohmann::json::parse(ManifestToJson(m), nullptr, false);
  EXPECT_TRUE(j["metadata"].is_string());
}

// 1,000,000 chunks in 2,000 tensors of 500 row blocks each.
TEST(Manifest, MillionChunks) {
  Manifest m;
  for (int f = 0; f < 64; ++f) m.files.push_back("data/" + std::to_string(f) + ".safetensors");
  m.tensors.resize(2000);
  uint64_t n = 0;
  for (int t = 0; t < 2000; ++t) {
    TensorRecord& tr = m.tensors[t];
    char key[32];
    std::snprintf(key, sizeof(key), "model.layer%04d.weight", t);
    tr.key = key;
    tr.dtype = DType::kBF16;
    tr.shape = {2000, 512};
    tr.chunks.reserve(500);
    for (int c = 0; c < 500; ++c, ++n) {
      tr.chunks.push_back(Chunk(Box({4 * c, 0}, {4, 512}), static_cast<uint32_t>(n % 64),
                                4096 + (n / 64) * 4096, 4096, n * 0x9e3779b97f4a7c15ull));
    }
  }
  m.has_common = true;
  m.common = "x";
  m.metadata_json = "{}";
  using Clock = std::chrono::steady_clock;
  auto t0 = Clock::now();
  std::string bytes = EncodeManifest(m);
  auto t1 = Clock::now();
  Result<Manifest> r = DecodeManifest(bytes, kName);
  auto t2 = Clock::now();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(SameManifest(m, *r));
  auto ms = [](auto d) { return std::chrono::duration<double, std::milli>(d).count(); };
  std::printf("1M chunks: %zu bytes, encode %.1f ms, decode %.1f ms\n", bytes.size(), ms(t1 - t0),
              ms(t2 - t1));
}

}  // namespace
}  // namespace shardpoint::internal_format
