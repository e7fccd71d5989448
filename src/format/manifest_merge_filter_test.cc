// MergeShards for one loading rank (its boxes given): only the chunks that
// meet its boxes and only the objects of the shards it got are kept, every
// record still checked against the index; ShardsForBoxes asks one shard per
// object, the run holding it, not every run of its key.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <tuple>

#include "src/format/manifest_index.h"

namespace shardpoint::internal_format {
namespace {

const std::string kDir = "/ckpt/step_9";

// "w" [64, 8] in 16 chunks of 4 rows (seeded offsets and checksums), "x" [2]
// in one, and objects "rng" [i] over a 300 grid, the unsharded "step".
Manifest FilterManifest(std::mt19937_64& rng) {
  Manifest m;
  m.files = {"data/0.safetensors", "data/1.safetensors"};
  TensorRecord w{"w", DType::kF32, {64, 8}, {}};
  uint64_t at = 0;
  for (int64_t r = 0; r < 64; r += 4) {
    const uint64_t n = 4 * 8 * 4;
    w.chunks.push_back(
        {Box({r, 0}, {4, 8}), static_cast<uint32_t>(r / 4 % 2), at, n, rng(), {rng()}});
    at += n;
  }
  m.tensors = {w, TensorRecord{"x", DType::kF32, {2}, {{Box({0}, {2}), 0, at, 8, rng(), {rng()}}}}};
  for (int64_t i = 0; i < 300; ++i) {
    ObjectRecord o;
    o.key = "rng", o.index = {i}, o.grid = {300};
    o.file = static_cast<uint32_t>(i % 2), o.offset = 4096 + 16 * i, o.nbytes = 16;
    o.checksum = rng();
    m.objects.push_back(o);
  }
  ObjectRecord step;
  step.key = "step", step.file = 1, step.offset = 9000, step.nbytes = 8, step.checksum = rng();
  m.objects.push_back(step);
  return CanonicalFileOrder(m);
}

std::vector<std::pair<uint32_t, std::string>> Given(const SplitResult& split,
                                                    const std::vector<uint32_t>& shards) {
  std::vector<std::pair<uint32_t, std::string>> have;
  for (uint32_t s : shards) have.emplace_back(s, split.shards[s]);
  return have;
}

TEST(ManifestMergeFilterTest, KeepsExactlyTheChunksMeetingTheBoxesAndNoObjectSkeletons) {
  std::mt19937_64 rng(2911);
  const Manifest m = FilterManifest(rng);
  const SplitResult split = SplitManifest(m, 256, 256);
  ASSERT_GT(split.index.tensors[0].parts.size(), 4u);  // "w" in parts
  const Box rows({18, 2}, {7, 3});                     // rows 18-24: chunks 16, 20, 24
  const std::vector<KeyBoxes> keep = {{"w", {rows}}};
  const std::vector<uint32_t> shards = ShardsForBoxes(split.index, keep, {});
  // Unfiltered, the parts' every chunk; filtered, exactly the three.
  Result<Manifest> all = MergeShards(split.index, Given(split, shards), kDir);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  Result<Manifest> mine = MergeShards(split.index, Given(split, shards), kDir, &keep);
  ASSERT_TRUE(mine.ok()) << mine.status().ToString();
  ASSERT_EQ(mine->tensors.size(), 2u);
  std::vector<ChunkRecord> want;
  for (const ChunkRecord& c : m.tensors[0].chunks) {
    if (c.box.offset[0] >= 16 && c.box.offset[0] <= 24) want.push_back(c);
  }
  ASSERT_EQ(want.size(), 3u);
  ASSERT_EQ(mine->tensors[0].chunks.size(), want.size());
  EXPECT_GT(all->tensors[0].chunks.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    const ChunkRecord& a = mine->tensors[0].chunks[i];
    EXPECT_EQ(a.box, want[i].box);
    EXPECT_EQ(mine->files[a.file], m.files[want[i].file]);
    EXPECT_EQ(std::tie(a.offset, a.nbytes, a.checksum, a.block_sums),
              std::tie(want[i].offset, want[i].nbytes, want[i].checksum, want[i].block_sums));
  }
  // "x" keeps its place, dtype and shape, with no chunk; no object skeleton.
  EXPECT_EQ(mine->tensors[1].key, "x");
  EXPECT_EQ(mine->tensors[1].shape, Shape{2});
  EXPECT_TRUE(mine->tensors[1].chunks.empty());
  EXPECT_TRUE(mine->objects.empty());
  EXPECT_EQ(all->objects.size(), m.objects.size());  // unfiltered: every skeleton
  EXPECT_EQ(ObjectKeys(split.index), (std::vector<std::string>{"rng", "step"}));
}

TEST(ManifestMergeFilterTest, AnObjectIsAskedOfTheOneShardOfItsRun) {
  std::mt19937_64 rng(2912);
  const Manifest m = FilterManifest(rng);
  const SplitResult split = SplitManifest(m, 1000);
  size_t rng_runs = 0;
  for (const ObjectRun& r : split.index.objects) rng_runs += r.key == "rng" ? 1 : 0;
  ASSERT_GT(rng_runs, 4u);
  const std::vector<KeyBoxes> none;
  for (const ObjectAt& o :
       std::vector<ObjectAt>{{"rng", {0}}, {"rng", {151}}, {"rng", {299}}, {"step", {}}}) {
    const std::vector<uint32_t> shards = ShardsForBoxes(split.index, {}, {o});
    ASSERT_EQ(shards.size(), 1u) << o.key << ShapeToString(o.index);
    Result<Manifest> mine = MergeShards(split.index, Given(split, shards), kDir, &none);
    ASSERT_TRUE(mine.ok()) << mine.status().ToString();
    EXPECT_LT(mine->objects.size(), m.objects.size() / 4);
    auto same = [&](const ObjectRecord& r) { return r.key == o.key && r.index == o.index; };
    auto got = std::find_if(mine->objects.begin(), mine->objects.end(), same);
    auto was = std::find_if(m.objects.begin(), m.objects.end(), same);
    ASSERT_NE(got, mine->objects.end()) << o.key << ShapeToString(o.index);
    EXPECT_EQ(std::tie(got->offset, got->nbytes, got->checksum),
              std::tie(was->offset, was->nbytes, was->checksum));
    EXPECT_EQ(mine->files[got->file], m.files[was->file]);
  }
  // Not in the checkpoint: no shard (the load reports it missing).
  EXPECT_TRUE(ShardsForBoxes(split.index, {}, {{"rng", {300}}, {"nope", {}}}).empty());
}

TEST(ManifestMergeFilterTest, AWrongChunkCountIsDataLossThoughTheChunksAreNotKept) {
  std::mt19937_64 rng(2913);
  const Manifest m = FilterManifest(rng);
  const SplitResult split = SplitManifest(m, 256, 256);
  ManifestIndex bad = split.index;
  bad.tensors[0].parts.back().num_chunks += 1;  // the last part, far from the box
  const std::vector<KeyBoxes> keep = {{"w", {Box({0, 0}, {4, 8})}}};
  std::vector<uint32_t> every;
  for (size_t s = 0; s < split.shards.size(); ++s) every.push_back(static_cast<uint32_t>(s));
  Result<Manifest> merged = MergeShards(bad, Given(split, every), kDir, &keep);
  ASSERT_EQ(merged.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(merged.status().message().find("differs from the index (dtype, shape or chunk count)"),
            std::string::npos)
      << merged.status().message();
}

}  // namespace
}  // namespace shardpoint::internal_format
