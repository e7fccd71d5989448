// Format v6: the index names the shard files and each shard's file; a
// shard's offset is the sum of the sizes of the lower-numbered shards of its
// file. Round trip, the decode checks (DataLoss naming the index), and the
// v3 to v5 layouts still read with every shard in data/manifest.shards.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "src/format/checksum.h"
#include "src/format/manifest_index.h"

namespace shardpoint::internal_format {
namespace {

const std::string kDir = "/ckpt/step_6";

// A seeded v2 manifest of `keys` tensors in row chunks over two data files,
// and objects "rng" [i] of a 12 grid.
Manifest SmallManifest(std::mt19937_64& rng, int keys) {
  Manifest m;
  m.files = {"data/0.safetensors", "data/1.safetensors"};
  for (int k = 0; k < keys; ++k) {
    TensorRecord t{"t" + std::to_string(100 + k), DType::kF32, {8, 2}, {}};
    for (int64_t r = 0; r < 8; r += 2) {
      t.chunks.push_back({Box({r, 0}, {2, 2}),
                          static_cast<uint32_t>(rng() % 2),
                          rng() % 4096,
                          16,
                          rng(),
                          {rng()}});
    }
    m.tensors.push_back(std::move(t));
  }
  for (int64_t i = 0; i < 12; ++i)
    m.objects.push_back({"rng", {i}, {12}, 0, uint64_t(8 * i), 8, rng()});
  m.has_common = true;
  m.common = "c";
  m.metadata_json = "{}";
  return CanonicalFileOrder(m);
}

std::vector<std::pair<uint32_t, std::string>> All(const SplitResult& s) {
  std::vector<std::pair<uint32_t, std::string>> out;
  for (size_t i = 0; i < s.shards.size(); ++i) out.emplace_back(i, s.shards[i]);
  return out;
}

// `split`'s shards spread over three files, shard s in file s % 3 (the
// format allows a file's shards to be any subset, in shard order).
ManifestIndex ThreeFiles(const SplitResult& split) {
  ManifestIndex idx = split.index;
  idx.shard_files = {0, 7, kMainShards};
  for (size_t s = 0; s < idx.shards.size(); ++s) idx.shards[s].file = s % 3;
  return idx;
}

TEST(ManifestIndexV6Test, ShardFilesRoundTripWithOffsetsPerFile) {
  std::mt19937_64 rng(606);
  const Manifest m = SmallManifest(rng, 20);
  const SplitResult split = SplitManifest(m, 200, 100, 3);
  ASSERT_EQ(split.index.version, 6u);
  EXPECT_EQ(split.index.shard_files, std::vector<uint32_t>{3});
  EXPECT_EQ(ShardFileName(3), "data/manifest.3.shards");
  EXPECT_EQ(ShardFileName(kMainShards), "data/manifest.shards");
  ASSERT_GT(split.shards.size(), 6u);
  const ManifestIndex idx = ThreeFiles(split);
  const std::string bytes = EncodeIndex(idx);
  ASSERT_EQ(EncodedVersion(bytes), 6u);
  Result<ManifestIndex> back = DecodeIndex(bytes, kDir + "/manifest");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(EncodeIndex(*back), bytes);
  EXPECT_EQ(back->shard_files, idx.shard_files);
  std::vector<uint64_t> end(3, 0);
  for (size_t s = 0; s < back->shards.size(); ++s) {
    const ShardRef& r = back->shards[s];
    EXPECT_EQ(r.file, s % 3);
    EXPECT_EQ(r.offset, end[s % 3]) << "shard " << s;
    EXPECT_EQ(r.nbytes, split.shards[s].size());
    end[s % 3] += r.nbytes;
  }
  EXPECT_EQ(ShardName(*back, 4, kDir),
            kDir + "/data/manifest.7.shards shard 4 (bytes [" +
                std::to_string(back->shards[1].nbytes) + ", " +
                std::to_string(back->shards[1].nbytes + back->shards[4].nbytes) + "))");
  // The shards' bytes do not depend on their file: the same manifest back.
  Result<Manifest> merged = MergeShards(*back, All(split), kDir);
  ASSERT_TRUE(merged.ok()) << merged.status().ToString();
  EXPECT_EQ(EncodeManifest(*merged), EncodeManifest(m));
  // A checksum error names the shard's own file.
  auto have = All(split);
  have[5].second[10] ^= 1;
  EXPECT_NE(MergeShards(*back, have, kDir)
                .status()
                .message()
                .find("manifest shard '" + kDir + "/data/manifest.shards shard 5 (bytes ["),
            std::string::npos);
}

TEST(ManifestIndexV6Test, BadShardFilesAreDataLossNamingTheIndex) {
  std::mt19937_64 rng(607);
  const SplitResult split = SplitManifest(SmallManifest(rng, 6), 200, 100);
  ASSERT_GE(split.shards.size(), 3u);
  const std::string pre = "manifest index 'm': ";
  auto error = [&](auto change) {
    ManifestIndex bad = ThreeFiles(split);
    change(bad);
    return DecodeIndex(EncodeIndex(bad), "m").status();
  };
  EXPECT_EQ(error([](ManifestIndex&) {}).code(), StatusCode::kOk);
  // Files are listed by writer, strictly increasing: a repeat or a step back
  // is named with both files.
  EXPECT_EQ(error([](ManifestIndex& i) { i.shard_files[1] = 0; }).message(),
            pre +
                "shard file 1 'data/manifest.0.shards' does not follow shard file 0 "
                "'data/manifest.0.shards' (writers in increasing order)");
  EXPECT_EQ(error([](ManifestIndex& i) {
              i.shard_files = {7, 0, kMainShards};
            }).message(),
            pre +
                "shard file 1 'data/manifest.0.shards' does not follow shard file 0 "
                "'data/manifest.7.shards' (writers in increasing order)");
  EXPECT_EQ(error([](ManifestIndex& i) { i.shards[2].file = 3; }).message(),
            pre + "shard 2 is in shard file 3 but there are 3 shard files");
  EXPECT_EQ(error([](ManifestIndex& i) {
              for (ShardRef& r : i.shards) r.file = r.file == 1 ? 0 : r.file;
            }).message(),
            pre + "shard file 1 'data/manifest.7.shards' holds no shard");
  EXPECT_EQ(error([&](ManifestIndex& i) {
              for (size_t s = 3; s < i.shards.size() + 2; ++s) {
                i.shard_files.insert(i.shard_files.end() - 1, static_cast<uint32_t>(100 + s));
              }
            }).message(),
            pre + std::to_string(split.shards.size() + 2) + " shard files but " +
                std::to_string(split.shards.size()) + " shards (each file holds at least one)");
  // No shard: no file either.
  ManifestIndex empty;
  empty.shard_files = {kMainShards};
  EXPECT_EQ(DecodeIndex(EncodeIndex(empty), "m").status().message(),
            pre + "1 shard files but 0 shards (each file holds at least one)");
  empty.shard_files.clear();
  EXPECT_TRUE(DecodeIndex(EncodeIndex(empty), "m").ok());
  // A shard-file count beyond the bytes is bounded before allocating.
  std::string bytes = EncodeIndex(split.index);
  const uint64_t huge = uint64_t{1} << 60;
  std::memcpy(bytes.data() + 24, &huge, 8);
  const uint64_t sum = Checksum64(bytes.data(), bytes.size() - 8);
  std::memcpy(bytes.data() + bytes.size() - 8, &sum, 8);
  EXPECT_NE(DecodeIndex(bytes, "m").status().message().find("shard file count 1152921504606846976"),
            std::string::npos);
  // Truncated anywhere: DataLoss, never a crash.
  const std::string good = EncodeIndex(ThreeFiles(split));
  for (size_t n = 0; n < good.size(); n += 3) {
    EXPECT_EQ(DecodeIndex(std::string_view(good).substr(0, n), "m").status().code(),
              StatusCode::kDataLoss);
  }
}

// Before v6 there is one shards file: the decode says so, and the encoder
// writes an index of it in any version.
TEST(ManifestIndexV6Test, Versions3To5ReadWithEveryShardInTheShardsFile) {
  std::mt19937_64 rng(608);
  const Manifest m = SmallManifest(rng, 10);
  SplitResult split = SplitManifest(m, 200, uint64_t{1} << 30);
  for (uint32_t v : {kIndexVersionV3, kIndexVersionV4, kIndexVersionV5}) {
    ManifestIndex idx = split.index;
    idx.version = v;
    const std::string bytes = EncodeIndex(idx);
    idx.shard_files.clear();  // also encodable: the same bytes
    EXPECT_EQ(EncodeIndex(idx), bytes);
    Result<ManifestIndex> back = DecodeIndex(bytes, "m");
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_EQ(back->version, v);
    EXPECT_EQ(back->shard_files, std::vector<uint32_t>{kMainShards});
    uint64_t at = 0;
    for (const ShardRef& r : back->shards) {
      EXPECT_EQ(r.file, 0u);
      EXPECT_EQ(r.offset, at);
      at += r.nbytes;
    }
    EXPECT_EQ(EncodeIndex(*back), bytes);
    Result<Manifest> merged = MergeShards(*back, All(split), kDir);
    ASSERT_TRUE(merged.ok()) << merged.status().ToString();
    EXPECT_EQ(EncodeManifest(*merged), EncodeManifest(m));
  }
}

TEST(ManifestIndexV6DeathTest, AnOlderVersionOfSeveralShardFilesIsNotEncoded) {
  std::mt19937_64 rng(609);
  ManifestIndex idx = ThreeFiles(SplitManifest(SmallManifest(rng, 6), 200, 100));
  idx.version = kIndexVersionV5;
  EXPECT_DEATH(EncodeIndex(idx), "other files than data/manifest.shards");
}

}  // namespace
}  // namespace shardpoint::internal_format
