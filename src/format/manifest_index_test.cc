#include "src/format/manifest_index.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <tuple>

#include "src/format/checksum.h"

namespace shardpoint::internal_format {
namespace {

const std::string kDir = "/ckpt/step_10";

// A seeded random v2 manifest: `keys` tensors of 1 to 3 dims, each cut into
// chunks along dim 0 spread over `files` files, and a few objects.
Manifest RandomManifest(std::mt19937& rng, int keys, int files) {
  Manifest m;
  for (int f = 0; f < files; ++f) m.files.push_back("data/" + std::to_string(f) + ".safetensors");
  for (int k = 0; k < keys; ++k) {
    TensorRecord t;
    t.key = "layers." + std::to_string(k) + ".w";
    t.dtype = DType::kBF16;
    const int64_t rows = 1 + rng() % 64;
    t.shape = {rows, 1 + static_cast<int64_t>(rng() % 8)};
    for (int64_t r = 0; r < rows;) {
      const int64_t n = std::min<int64_t>(rows - r, 1 + rng() % 16);
      ChunkRecord c;
      c.box = Box({r, 0}, {n, t.shape[1]});
      c.file = rng() % files;
      c.offset = rng() % 100000;
      c.nbytes = static_cast<uint64_t>(n * t.shape[1] * 2);
      c.checksum = rng();
      c.block_sums = {static_cast<uint64_t>(rng())};
      t.chunks.push_back(c);
      r += n;
    }
    m.tensors.push_back(std::move(t));
  }
  std::sort(m.tensors.begin(), m.tensors.end(),
            [](const TensorRecord& a, const TensorRecord& b) { return a.key < b.key; });
  for (int i = 0; i < 4; ++i) {
    ObjectRecord o;
    o.key = i < 2 ? "rng" : "step";
    o.index = i < 2 ? Shape{i} : Shape{};
    o.grid = i < 2 ? Shape{2} : Shape{};
    o.file = rng() % files;
    o.offset = i;
    o.nbytes = 8;
    o.checksum = rng();
    if (i < 3) m.objects.push_back(o);
  }
  m.has_common = true;
  m.common = "common";
  m.metadata_json = "{\"step\": 10}";
  return m;
}

std::vector<std::pair<uint32_t, std::string>> All(const SplitResult& s) {
  std::vector<std::pair<uint32_t, std::string>> out;
  for (size_t i = 0; i < s.shards.size(); ++i) out.emplace_back(i, s.shards[i]);
  return out;
}

// Encodes `split`'s index, decodes it (re-encoding to the same bytes) and
// merges the shards back: the same encoding as `m`'s canonical manifest.
void ExpectRoundTrip(const Manifest& m, const SplitResult& split, const std::string& what) {
  const std::string index_bytes = EncodeIndex(split.index);
  ASSERT_EQ(EncodedVersion(index_bytes), kIndexVersion);
  Result<ManifestIndex> idx = DecodeIndex(index_bytes, kDir + "/manifest");
  ASSERT_TRUE(idx.ok()) << idx.status().ToString();
  EXPECT_EQ(EncodeIndex(*idx), index_bytes);
  Result<Manifest> merged = MergeShards(*idx, All(split), kDir);
  ASSERT_TRUE(merged.ok()) << merged.status().ToString();
  EXPECT_EQ(EncodeManifest(*merged), EncodeManifest(CanonicalFileOrder(m))) << what;
}

TEST(ManifestIndexTest, SplitThenMergeGivesTheManifestBack) {
  std::mt19937 rng(41);
  for (int trial = 0; trial < 12; ++trial) {
    const Manifest m = RandomManifest(rng, 1 + trial * 3, 1 + trial % 5);
    for (uint64_t shard_bytes : {uint64_t{1}, uint64_t{300}, uint64_t{1} << 30}) {
      const SplitResult split = SplitManifest(m, shard_bytes, uint64_t{1} << 30);
      ExpectRoundTrip(
          m, split,
          "trial " + std::to_string(trial) + " shard_bytes " + std::to_string(shard_bytes));
      if (shard_bytes == 1) {
        // One record a shard: the objects' own shards, one per object.
        EXPECT_EQ(split.shards.size(), m.tensors.size() + m.objects.size());
      }
      if (shard_bytes == (uint64_t{1} << 30)) {
        EXPECT_LE(split.shards.size(), 2u);
      }
    }
  }
}

TEST(ManifestIndexTest, RecordsCutIntoPartsMergeBackBitForBit) {
  std::mt19937 rng(44);
  for (int trial = 0; trial < 8; ++trial) {
    const Manifest m = RandomManifest(rng, 2 + trial * 3, 1 + trial % 4);
    for (uint64_t part_bytes : {uint64_t{1}, uint64_t{200}, uint64_t{700}}) {
      const SplitResult split = SplitManifest(m, 300, part_bytes);
      size_t parts = 0;
      for (const TensorEntry& t : split.index.tensors) parts += t.parts.size();
      if (part_bytes == 1 && trial > 0) {
        EXPECT_GT(parts, m.tensors.size()) << "trial " << trial;
      }
      ExpectRoundTrip(
          m, split, "trial " + std::to_string(trial) + " part_bytes " + std::to_string(part_bytes));
    }
  }
}

// A rank reading rows [20, 23) of one tensor gets the parts whose span meets
// them: every chunk overlapping its box, few others.
TEST(ManifestIndexTest, ShardsForBoxesReadOnlyThePartsOverlappingTheBoxes) {
  Manifest m;
  m.files = {"data/0.safetensors", "data/1.safetensors"};
  TensorRecord t{"w", DType::kF32, {64, 4}, {}};
  for (int64_t r = 0; r < 64; ++r) {
    const uint64_t n = 16;
    t.chunks.push_back({Box({r, 0}, {1, 4}),
                        static_cast<uint32_t>(r % 2),
                        static_cast<uint64_t>(r) * n,
                        n,
                        static_cast<uint64_t>(1000 + r),
                        {7}});
  }
  m.tensors = {t, TensorRecord{"x", DType::kF32, {2}, {{Box({0}, {2}), 0, 0, 8, 1, {2}}}}};
  const SplitResult split = SplitManifest(m, 256, 256);
  const TensorEntry& w = split.index.tensors[0];
  ASSERT_GT(w.parts.size(), 8u);
  const Box want({20, 1}, {3, 2});
  const std::vector<uint32_t> shards = ShardsForBoxes(split.index, {{"w", {want}}}, {});
  ASSERT_GE(shards.size(), 1u);
  ASSERT_LE(shards.size(), 2u);
  std::vector<std::pair<uint32_t, std::string>> have;
  for (uint32_t s : shards) have.emplace_back(s, split.shards[s]);
  Result<Manifest> part = MergeShards(split.index, have, kDir);
  ASSERT_TRUE(part.ok()) << part.status().ToString();
  ASSERT_EQ(part->tensors.size(), 2u);
  EXPECT_TRUE(part->tensors[1].chunks.empty());  // "x" was not asked for
  std::vector<uint64_t> got;
  for (const ChunkRecord& c : part->tensors[0].chunks) got.push_back(c.checksum);
  for (uint64_t r = 20; r < 23; ++r) {
    EXPECT_NE(std::find(got.begin(), got.end(), 1000 + r), got.end()) << "row " << r;
  }
  EXPECT_LT(got.size(), 16u);
  // Every part of a key (ShardsForKeys), and a box of the wrong rank, read all.
  EXPECT_EQ(ShardsForKeys(split.index, {"w"}, {}).size(), w.parts.size());
  EXPECT_EQ(ShardsForBoxes(split.index, {{"w", {Box({0}, {1})}}}, {}).size(), w.parts.size());
}

// Format v3 (one record a shard, no parts), which saves wrote before v4:
// still decoded and merged.
TEST(ManifestIndexTest, AVersion3IndexStillReads) {
  std::mt19937 rng(45);
  const Manifest m = RandomManifest(rng, 20, 3);
  SplitResult split = SplitManifest(m, 300, uint64_t{1} << 30);
  split.index.version = 3;
  const std::string bytes = EncodeIndex(split.index);
  ASSERT_EQ(EncodedVersion(bytes), 3u);
  Result<ManifestIndex> idx = DecodeIndex(bytes, "m");
  ASSERT_TRUE(idx.ok()) << idx.status().ToString();
  EXPECT_EQ(idx->version, 3u);
  EXPECT_EQ(EncodeIndex(*idx), bytes);
  Result<Manifest> merged = MergeShards(*idx, All(split), kDir);
  ASSERT_TRUE(merged.ok()) << merged.status().ToString();
  EXPECT_EQ(merged->version, 3u);
  EXPECT_EQ(EncodeManifest(*merged), EncodeManifest(CanonicalFileOrder(m)));
  // The v3 layout: a tensor entry is key, dtype, rank, dims, u32 shard, u64
  // chunk count; the first tensor's entry follows the shard table.
  const size_t at = 8 + 4 + 4 + 8 + 8 + 16 * split.index.shards.size() + 8;
  const TensorEntry& t0 = split.index.tensors[0];
  const size_t shard_at = at + 4 + t0.key.size() + 1 + 1 + 8 * t0.shape.size();
  uint32_t shard;
  uint64_t chunks;
  std::memcpy(&shard, bytes.data() + shard_at, 4);
  std::memcpy(&chunks, bytes.data() + shard_at + 4, 8);
  EXPECT_EQ(shard, t0.parts[0].shard);
  EXPECT_EQ(chunks, m.tensors[0].chunks.size());
}

// Version 5 encodes objects as runs (one entry for the 64 indices of `rng`),
// version 4 one entry per object: both decode to the same runs and merge to
// the same manifest.
TEST(ManifestIndexTest, Version5EncodesObjectRunsVersion4EachObject) {
  std::mt19937 rng(47);
  Manifest m = RandomManifest(rng, 8, 2);
  m.objects.clear();
  for (int64_t i = 0; i < 64; ++i) {
    m.objects.push_back({"rng",
                         {i},
                         {64},
                         static_cast<uint32_t>(i % 2),
                         uint64_t(8 * i),
                         8,
                         static_cast<uint64_t>(rng())});
  }
  m.objects.push_back({"step", {}, {}, 0, 1000, 8, 7});
  const SplitResult split = SplitManifest(m, 600, 300);
  ASSERT_EQ(split.index.version, kIndexVersion);
  ASSERT_GT(split.index.objects.size(), 2u);  // rng's 64 in several shards
  ASSERT_LT(split.index.objects.size(), 20u);
  ManifestIndex v4 = split.index, v5 = split.index;
  v4.version = kIndexVersionV4;
  v5.version = kIndexVersionV5;
  const std::string b5 = EncodeIndex(v5), b4 = EncodeIndex(v4);
  ASSERT_EQ(EncodedVersion(b5), 5u);
  ASSERT_EQ(EncodedVersion(b4), 4u);
  // v4: 64 + 1 entries of 4 + key + 1 + 8R + 1 + 8R + 4 bytes; v5: per run
  // 4 + key + 1 + 16R + 8 + 4.
  uint64_t e4 = 0, e5 = 0;
  for (const ObjectRun& o : split.index.objects) {
    e4 += o.count * (10 + o.key.size() + 16 * o.grid.size());
    e5 += 17 + o.key.size() + 16 * o.grid.size();
  }
  EXPECT_EQ(b4.size() - b5.size(), e4 - e5);
  for (const std::string& bytes : {b5, b4}) {
    Result<ManifestIndex> idx = DecodeIndex(bytes, "m");
    ASSERT_TRUE(idx.ok()) << idx.status().ToString();
    EXPECT_EQ(EncodeIndex(*idx), bytes);
    ASSERT_EQ(idx->objects.size(), split.index.objects.size());
    for (size_t i = 0; i < idx->objects.size(); ++i) {
      const ObjectRun &a = idx->objects[i], &b = split.index.objects[i];
      EXPECT_EQ(std::tie(a.key, a.grid, a.first, a.last, a.count, a.shard),
                std::tie(b.key, b.grid, b.first, b.last, b.count, b.shard));
    }
    Result<Manifest> merged = MergeShards(*idx, All(split), kDir);
    ASSERT_TRUE(merged.ok()) << merged.status().ToString();
    EXPECT_EQ(EncodeManifest(*merged), EncodeManifest(CanonicalFileOrder(m)));
  }
}

// A v5 object run that lies (checksum recomputed): DataLoss naming the run.
TEST(ManifestIndexTest, ABadObjectRunIsDataLossNamingIt) {
  std::mt19937 rng(48);
  Manifest m = RandomManifest(rng, 4, 2);
  m.objects.clear();
  for (int64_t i = 0; i < 8; ++i) m.objects.push_back({"rng", {i}, {8}, 0, 0, 8, 1});
  m.objects.push_back({"step", {}, {}, 0, 0, 8, 1});
  const SplitResult split = SplitManifest(m);
  ASSERT_EQ(split.index.objects.size(), 2u);
  auto error = [&](auto change) {
    ManifestIndex bad = split.index;
    change(bad.objects[0], bad);
    return DecodeIndex(EncodeIndex(bad), "m").status().message();
  };
  const std::string pre = "manifest index 'm': object run 'rng' ";
  EXPECT_EQ(error([](ObjectRun& r, ManifestIndex&) { r.count = 0; }),
            pre + "count 0 from index [0] is 0 or runs past the end of its grid [8]");
  EXPECT_EQ(error([](ObjectRun& r, ManifestIndex&) { r.first = {1}; }),
            pre + "count 8 from index [1] is 0 or runs past the end of its grid [8]");
  EXPECT_EQ(error([](ObjectRun& r, ManifestIndex&) { r.first = {8}; }),
            pre + "first index [8] lies outside its grid [8]");
  EXPECT_EQ(error([](ObjectRun& r, ManifestIndex&) { r.grid = {-8}; }),
            pre + "has invalid grid [-8] (negative or overflowing)");
  EXPECT_EQ(
      error([](ObjectRun& r, ManifestIndex&) { r.shard = 9; }),
      pre + "is in shard 9 but there are " + std::to_string(split.index.shards.size()) + " shards");
  // Runs overlapping: the second from index 7 of the first's 8.
  EXPECT_EQ(error([](ObjectRun&, ManifestIndex& i) {
              i.objects.insert(i.objects.begin() + 1, i.objects[0]);
              i.objects[1].first = {7};
              i.objects[1].count = 1;
            }),
            pre +
                "from index [7] does not start after the previous run (sorted by (key, index), "
                "unique)");
  // More objects than their shard's bytes hold as records, or than any index may.
  const uint32_t s = split.index.objects[0].shard;
  EXPECT_EQ(error([](ObjectRun& r, ManifestIndex&) {
              r.grid = {1 << 20};
              r.count = 1 << 20;
            }),
            pre + "puts more objects in shard " + std::to_string(s) + " than its " +
                std::to_string(split.index.shards[s].nbytes) + " bytes can hold");
  EXPECT_EQ(error([](ObjectRun& r, ManifestIndex&) {
              r.grid = {int64_t{1} << 40};
              r.count = (uint64_t{1} << 24) + 1;
            }),
            "manifest index 'm': more than 16777216 objects (at object run 'rng')");
}

// Parts that lie: a span outside the tensor (DecodeIndex), a chunk outside
// its part's span (MergeShards): DataLoss naming the tensor and part.
TEST(ManifestIndexTest, ABadPartIsDataLossNamingIt) {
  std::mt19937 rng(46);
  const Manifest m = RandomManifest(rng, 10, 2);
  SplitResult split = SplitManifest(m, 300, 100);
  size_t k = 0;
  while (k < split.index.tensors.size() && split.index.tensors[k].parts.size() < 2) ++k;
  ASSERT_LT(k, split.index.tensors.size());
  const std::string key = split.index.tensors[k].key;
  ManifestIndex bad = split.index;
  const size_t rank = bad.tensors[k].shape.size();
  bad.tensors[k].spans[2 * rank + rank] = bad.tensors[k].shape[0] + 1;  // part 1's extent 0
  EXPECT_NE(DecodeIndex(EncodeIndex(bad), "m")
                .status()
                .message()
                .find("tensor '" + key + "' part 1 span"),
            std::string::npos);
  bad = split.index;
  TensorPart& p = bad.tensors[k].parts[1];
  bad.tensors[k].spans[2 * rank + rank] = 0;
  Result<Manifest> r = MergeShards(bad, All(split), kDir);
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(r.status().message().find("shard " + std::to_string(p.shard) + " (bytes"),
            std::string::npos)
      << r.status().ToString();
  EXPECT_NE(r.status().message().find("tensor '" + key + "' part 1 has chunk"), std::string::npos)
      << r.status().ToString();
  bad = split.index;
  bad.tensors[k].parts[1].num_chunks += 1;
  EXPECT_NE(MergeShards(bad, All(split), kDir).status().message().find("chunk count"),
            std::string::npos);
}

TEST(ManifestIndexTest, APartialMergeHoldsOnlyTheRecordsOfTheShardsRead) {
  std::mt19937 rng(7);
  const Manifest m = CanonicalFileOrder(RandomManifest(rng, 30, 4));
  const SplitResult split = SplitManifest(m, 200);
  ASSERT_GT(split.shards.size(), 10u);
  const std::vector<std::string> want = {m.tensors[3].key, m.tensors[17].key};
  const std::vector<uint32_t> shards = ShardsForKeys(split.index, want, {"rng"});
  ASSERT_GE(shards.size(), 2u);
  std::vector<std::pair<uint32_t, std::string>> have;
  uint64_t read = 0;
  for (uint32_t s : shards) {
    have.emplace_back(s, split.shards[s]);
    read += split.shards[s].size();
  }
  Result<Manifest> part = MergeShards(split.index, have, kDir);
  ASSERT_TRUE(part.ok()) << part.status().ToString();
  ASSERT_EQ(part->tensors.size(), m.tensors.size());  // the same numbering on every rank
  ASSERT_EQ(part->objects.size(), m.objects.size());
  for (size_t i = 0; i < m.tensors.size(); ++i) {
    const TensorRecord& t = part->tensors[i];
    EXPECT_EQ(t.key, m.tensors[i].key);
    EXPECT_EQ(t.shape, m.tensors[i].shape);
    const bool read_it =
        std::count(shards.begin(), shards.end(), split.index.tensors[i].parts[0].shard);
    EXPECT_EQ(t.chunks.size(), read_it ? m.tensors[i].chunks.size() : 0u) << t.key;
    for (size_t c = 0; read_it && c < t.chunks.size(); ++c) {
      EXPECT_EQ(t.chunks[c].checksum, m.tensors[i].chunks[c].checksum);
      EXPECT_EQ(part->files[t.chunks[c].file], m.files[m.tensors[i].chunks[c].file]);
    }
  }
  EXPECT_EQ(part->objects[0].checksum, m.objects[0].checksum);
  EXPECT_EQ(part->objects[1].checksum, m.objects[1].checksum);
  uint64_t total = 0;
  for (const std::string& s : split.shards) total += s.size();
  EXPECT_LT(read, total / 3);
}

TEST(ManifestIndexTest, ABadShardIsDataLossNamingIt) {
  std::mt19937 rng(3);
  const Manifest m = RandomManifest(rng, 12, 3);
  SplitResult split = SplitManifest(m, 100);
  ASSERT_GT(split.shards.size(), 3u);
  auto err = [&](std::vector<std::pair<uint32_t, std::string>> have) {
    Result<Manifest> r = MergeShards(split.index, have, kDir);
    EXPECT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kDataLoss) << r.status().ToString();
    return r.status().message();
  };
  std::string flipped = split.shards[2];
  flipped[flipped.size() / 2] ^= 1;
  const ShardRef& two = split.index.shards[2];
  EXPECT_EQ(err({{2, flipped}})
                .find("manifest shard '/ckpt/step_10/data/manifest.shards shard 2 "
                      "(bytes [" +
                      std::to_string(two.offset) + ", " + std::to_string(two.offset + two.nbytes) +
                      "))': checksum mismatch"),
            0u);
  EXPECT_NE(
      err({{1, split.shards[1] + "x"}})
          .find("shard 1 (bytes [" + std::to_string(split.index.shards[1].offset) + ", " +
                std::to_string(split.index.shards[1].offset + split.index.shards[1].nbytes) +
                "))': " + std::to_string(split.shards[1].size() + 1) + " bytes but the index says"),
      std::string::npos);
  // A well-formed shard in the wrong place (the index's size and checksum
  // made to match): its records are not the ones the index puts there.
  split.index.shards[1] = split.index.shards[2];
  EXPECT_NE(err({{1, split.shards[2]}}).find("))': does not hold tensor"), std::string::npos);
  EXPECT_NE(err({{99, split.shards[2]}}).find("the index has"), std::string::npos);
}

TEST(ManifestIndexTest, ABadIndexIsDataLossNeverACrash) {
  std::mt19937 rng(5);
  const SplitResult split = SplitManifest(RandomManifest(rng, 6, 2), 100);
  const std::string good = EncodeIndex(split.index);
  for (size_t n = 0; n < good.size(); ++n) {
    Result<ManifestIndex> r = DecodeIndex(std::string_view(good).substr(0, n), "m");
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
  }
  std::string flipped = good;
  flipped[40] ^= 0x10;
  EXPECT_NE(DecodeIndex(flipped, "m").status().message().find("checksum mismatch"),
            std::string::npos);
  // Well-formed bytes (checksum recomputed) naming a shard that is not there.
  ManifestIndex bad = split.index;
  bad.tensors[2].parts[0].shard = 1000;
  Result<ManifestIndex> r = DecodeIndex(EncodeIndex(bad), "m");
  EXPECT_EQ(r.status().message(), "manifest index 'm': tensor '" + bad.tensors[2].key +
                                      "' is in shard 1000 but there are " +
                                      std::to_string(bad.shards.size()) + " shards");
  bad = split.index;
  std::swap(bad.tensors[0], bad.tensors[1]);
  EXPECT_NE(DecodeIndex(EncodeIndex(bad), "m").status().message().find("sorted and unique"),
            std::string::npos);
  // A v2 manifest is not an index, and the other way round.
  EXPECT_EQ(EncodedVersion(EncodeManifest(Manifest{})), 2u);
  EXPECT_FALSE(DecodeIndex(EncodeManifest(Manifest{}), "m").ok());
  EXPECT_FALSE(DecodeManifest(good, "m").ok());
}

}  // namespace
}  // namespace shardpoint::internal_format
