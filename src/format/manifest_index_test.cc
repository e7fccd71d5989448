#include "src/format/manifest_index.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

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

TEST(ManifestIndexTest, SplitThenMergeGivesTheManifestBack) {
  std::mt19937 rng(41);
  for (int trial = 0; trial < 12; ++trial) {
    const Manifest m = RandomManifest(rng, 1 + trial * 3, 1 + trial % 5);
    for (uint64_t shard_bytes : {uint64_t{1}, uint64_t{300}, uint64_t{1} << 30}) {
      const SplitResult split = SplitManifest(m, shard_bytes);
      const std::string index_bytes = EncodeIndex(split.index);
      ASSERT_EQ(EncodedVersion(index_bytes), 3u);
      Result<ManifestIndex> idx = DecodeIndex(index_bytes, kDir + "/manifest");
      ASSERT_TRUE(idx.ok()) << idx.status().ToString();
      EXPECT_EQ(EncodeIndex(*idx), index_bytes);
      Result<Manifest> merged = MergeShards(*idx, All(split), kDir);
      ASSERT_TRUE(merged.ok()) << merged.status().ToString();
      // Bit for bit: the same encoding as the canonical manifest.
      EXPECT_EQ(EncodeManifest(*merged), EncodeManifest(CanonicalFileOrder(m)))
          << "trial " << trial << " shard_bytes " << shard_bytes;
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
    const bool read_it = std::count(shards.begin(), shards.end(), split.index.tensors[i].shard);
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
  bad.tensors[2].shard = 1000;
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
