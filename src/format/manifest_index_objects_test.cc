// The index's objects held as runs (ManifestIndex::AddObject): what a
// loading rank decodes for 65,536 RNG objects is a few hundred runs, and the
// index bytes, a partial merge and a whole merge are what they were; and
// MergeShards, which frees a shard once its records are taken, still names
// an index that puts a record in a shard already taken.
#include <gtest/gtest.h>

#include <cstring>
#include <tuple>

#include "src/format/checksum.h"
#include "src/format/manifest_index.h"

namespace shardpoint::internal_format {
namespace {

const std::string kDir = "/ckpt/step_7";

ObjectRecord Obj(const std::string& key, Shape index, Shape grid, uint32_t file, uint64_t at) {
  ObjectRecord o;
  o.key = key, o.index = std::move(index), o.grid = std::move(grid);
  o.file = file, o.offset = at, o.nbytes = 16, o.checksum = 1000 + at;
  return o;
}

// One tensor, then objects: "opt" over a 3x4 grid (every index, so carries
// across the last dimension), "rng" over a 300 grid (every index), "sp"
// over a 10 grid with gaps (0, 1, 5, 6, 9), and the unsharded "step".
Manifest ObjectsManifest() {
  Manifest m;
  m.files = {"data/0.safetensors", "data/1.safetensors"};
  TensorRecord t{"w", DType::kF32, {4}, {}};
  ChunkRecord c;
  c.box = Box({0}, {4}), c.nbytes = 16, c.checksum = 5;
  t.chunks.push_back(c);
  m.tensors.push_back(t);
  uint64_t at = 0;
  for (int64_t i = 0; i < 3; ++i) {
    for (int64_t j = 0; j < 4; ++j) m.objects.push_back(Obj("opt", {i, j}, {3, 4}, 1, at++));
  }
  for (int64_t i = 0; i < 300; ++i) m.objects.push_back(Obj("rng", {i}, {300}, i % 2, at++));
  for (int64_t i : {0, 1, 5, 6, 9}) m.objects.push_back(Obj("sp", {i}, {10}, 0, at++));
  m.objects.push_back(Obj("step", {}, {}, 1, at++));
  return m;
}

TEST(ManifestIndexObjectsTest, ObjectsAreRunsAndEveryObjectRoundTripsBitForBit) {
  const Manifest m = CanonicalFileOrder(ObjectsManifest());
  // shard size: one record a shard; a few objects a shard; everything in one.
  for (uint64_t shard_bytes : {uint64_t{1}, uint64_t{1000}, uint64_t{1} << 30}) {
    const SplitResult split = SplitManifest(m, shard_bytes);
    const std::string bytes = EncodeIndex(split.index);
    Result<ManifestIndex> idx = DecodeIndex(bytes, kDir + "/manifest");
    ASSERT_TRUE(idx.ok()) << idx.status().ToString();
    EXPECT_EQ(EncodeIndex(*idx), bytes) << shard_bytes;
    EXPECT_EQ(idx->num_objects(), m.objects.size());
    EXPECT_EQ(idx->objects.size(), split.index.objects.size());
    if (shard_bytes == 1) {
      EXPECT_EQ(idx->objects.size(), m.objects.size());  // a run never spans two shards
    }
    if (shard_bytes == (uint64_t{1} << 30)) {
      // opt, rng, sp {0, 1}, {5, 6}, {9}, step.
      ASSERT_EQ(idx->objects.size(), 6u);
      EXPECT_EQ(idx->objects[0].count, 12u);
      EXPECT_EQ(idx->objects[1].count, 300u);
      EXPECT_EQ(idx->objects[3].first, Shape{5});
      EXPECT_EQ(idx->objects[3].count, 2u);
    }
    std::vector<std::pair<uint32_t, std::string>> all;
    for (size_t s = 0; s < split.shards.size(); ++s) all.emplace_back(s, split.shards[s]);
    Result<Manifest> whole = MergeShards(*idx, all, kDir);
    ASSERT_TRUE(whole.ok()) << whole.status().ToString();
    EXPECT_EQ(EncodeManifest(*whole), EncodeManifest(m)) << shard_bytes;
    // Only the shards of "sp": every object keeps its place and key, index
    // and grid; only those of "sp" have their location.
    std::vector<std::pair<uint32_t, std::string>> some;
    for (uint32_t s : ShardsForKeys(*idx, {}, {"sp"})) some.emplace_back(s, split.shards[s]);
    Result<Manifest> part = MergeShards(*idx, some, kDir);
    ASSERT_TRUE(part.ok()) << part.status().ToString();
    ASSERT_EQ(part->objects.size(), m.objects.size());
    for (size_t i = 0; i < m.objects.size(); ++i) {
      const ObjectRecord& a = part->objects[i];
      const ObjectRecord& b = m.objects[i];
      EXPECT_EQ(std::tie(a.key, a.index, a.grid), std::tie(b.key, b.index, b.grid)) << i;
      if (b.key == "sp") {
        EXPECT_EQ(a.checksum, b.checksum) << i;
      }
    }
  }
}

TEST(ManifestIndexObjectsTest, AnObjectOutOfOrderIsStillDataLossNamingIt) {
  Manifest m = CanonicalFileOrder(ObjectsManifest());
  SplitResult split = SplitManifest(m, uint64_t{1} << 30);
  // Version 4, one entry per object (version 5's runs: manifest_index_test).
  split.index.version = kIndexVersionV4;
  std::string bytes = EncodeIndex(split.index);
  // rng [4] becomes rng [2], a repeat of the object two before it: the
  // index is re-checksummed, so only the order check can catch it.
  std::string entry("rng", 3);
  const int64_t four = 4, two = 2;
  size_t at = 0;
  for (int k = 0; k <= 4; ++k) at = bytes.find(entry, at + 1);
  ASSERT_NE(at, std::string::npos);
  ASSERT_EQ(std::memcmp(bytes.data() + at + 4, &four, 8), 0);
  std::memcpy(bytes.data() + at + 4, &two, 8);
  const size_t body = bytes.size() - 8;
  const uint64_t sum = Checksum64(bytes.data(), body);
  std::memcpy(bytes.data() + body, &sum, 8);
  Result<ManifestIndex> idx = DecodeIndex(bytes, kDir + "/manifest");
  ASSERT_EQ(idx.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(idx.status().message().find("object 'rng' index [2] is not after the previous"),
            std::string::npos)
      << idx.status().message();
}

TEST(ManifestIndexObjectsTest, AShardTakenAgainAfterItWasFreedIsDataLossNamingIt) {
  Manifest m = CanonicalFileOrder(ObjectsManifest());
  TensorRecord second = m.tensors[0];
  second.key = "x";
  m.tensors.push_back(second);  // "w", "x": one record a shard with shard_bytes 1
  const SplitResult split = SplitManifest(m, 1);
  ManifestIndex bad = split.index;
  ASSERT_NE(bad.tensors[0].parts[0].shard, bad.tensors[1].parts[0].shard);
  bad.tensors[1].parts[0].shard = bad.tensors[0].parts[0].shard;
  std::vector<std::pair<uint32_t, std::string>> all;
  for (size_t s = 0; s < split.shards.size(); ++s) all.emplace_back(s, split.shards[s]);
  Result<Manifest> merged = MergeShards(bad, all, kDir);
  ASSERT_EQ(merged.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(merged.status().message().find("data/manifest.shards shard 0 (bytes [0, "),
            std::string::npos)
      << merged.status().message();
  EXPECT_NE(merged.status().message().find("does not hold tensor 'x' where the index puts it"),
            std::string::npos)
      << merged.status().message();
}

}  // namespace
}  // namespace shardpoint::internal_format
