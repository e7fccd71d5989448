// A loading rank's manifest: MergeShards with its boxes given keeps only the
// chunks that meet them and only the objects of the shards it got, every
// record still checked against the index; ShardsForBoxes asks one shard per
// object, the run holding it, not every run of its key. DecodeIndex with an
// IndexKeep checks every entry but builds only the rank's keys' entries,
// numbered as in the whole index, and the merge of that partial index holds
// the same records of its keys as the whole one's.
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

// 40 tensors "layers.<i>.w" [rows, 4] in chunks of 2 rows over 3 files
// (seeded sizes, offsets and checksums).
Manifest KeepManifest(std::mt19937_64& rng) {
  Manifest m;
  m.files = {"data/0.bin", "data/1.bin", "data/2.bin"};
  for (int i = 0; i < 40; ++i) {
    TensorRecord t{"layers." + std::to_string(100 + i) + ".w",
                   DType::kBF16,
                   {2 * static_cast<int64_t>(1 + rng() % 12), 4},
                   {}};
    for (int64_t r = 0; r < t.shape[0]; r += 2) {
      t.chunks.push_back({Box({r, 0}, {2, 4}),
                          static_cast<uint32_t>(rng() % 3),
                          rng() % 100000,
                          16,
                          rng(),
                          {rng()}});
    }
    m.tensors.push_back(t);
  }
  return CanonicalFileOrder(m);
}

TEST(ManifestIndexKeepTest, BuildsOnlyTheKeptEntriesNumberedAsInTheWholeIndex) {
  std::mt19937_64 rng(1129);
  const SplitResult split = SplitManifest(KeepManifest(rng), 200, 100);
  const std::string bytes = EncodeIndex(split.index);
  Result<ManifestIndex> whole = DecodeIndex(bytes, "m");
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  const std::vector<std::string> keys = {"layers.103.w", "layers.117.w", "layers.117.x",
                                         "layers.139.w"};
  const IndexKeep keep{&keys, 7, 3};
  Result<ManifestIndex> mine = DecodeIndex(bytes, "m", &keep);
  ASSERT_TRUE(mine.ok()) << mine.status().ToString();
  EXPECT_TRUE(mine->partial);
  EXPECT_EQ(mine->tensor_count, 40u);
  EXPECT_EQ(mine->tensor_numbers, (std::vector<uint64_t>{3, 17, 39}));
  ASSERT_EQ(mine->tensors.size(), 3u);  // "layers.117.x" is not stored
  for (size_t j = 0; j < 3; ++j) {
    const TensorEntry& a = mine->tensors[j];
    const TensorEntry& b = whole->tensors[mine->tensor_numbers[j]];
    EXPECT_EQ(a.key, b.key);
    EXPECT_EQ(a.shape, b.shape);
    EXPECT_EQ(a.spans, b.spans);
    ASSERT_EQ(a.parts.size(), b.parts.size());
    for (size_t p = 0; p < a.parts.size(); ++p) {
      EXPECT_EQ(a.parts[p].shard, b.parts[p].shard);
      EXPECT_EQ(a.parts[p].num_chunks, b.parts[p].num_chunks);
    }
  }
  // Rank 3 of 7 names the keys numbered 3, 10, 17, 24, 31, 38.
  ASSERT_EQ(mine->owned_keys.size(), 6u);
  for (size_t j = 0; j < 6; ++j) {
    EXPECT_EQ(mine->owned_keys[j].first, 3 + 7 * j);
    EXPECT_EQ(mine->owned_keys[j].second, whole->tensors[3 + 7 * j].key);
  }
  // The objects and shards are whole.
  EXPECT_EQ(mine->shards.size(), whole->shards.size());
  EXPECT_DEATH(EncodeIndex(*mine), "EncodeIndex of a partial index");
}

// An entry of a key the rank does not keep is checked all the same: the
// same DataLoss as the whole decode's.
TEST(ManifestIndexKeepTest, ABadEntryOfAnotherKeyFailsTheDecodeAlike) {
  std::mt19937_64 rng(1130);
  const SplitResult split = SplitManifest(KeepManifest(rng), 200, 100);
  const std::vector<std::string> keys = {"layers.100.w"};
  const IndexKeep keep{&keys, 1, 0};
  ManifestIndex bad = split.index;
  bad.tensors[25].parts[0].shard = 5000;
  std::string bytes = EncodeIndex(bad);
  Status whole = DecodeIndex(bytes, "m").status();
  EXPECT_EQ(whole.code(), StatusCode::kDataLoss);
  EXPECT_EQ(DecodeIndex(bytes, "m", &keep).status().ToString(), whole.ToString());
  bad = split.index;
  std::swap(bad.tensors[30], bad.tensors[31]);
  bytes = EncodeIndex(bad);
  whole = DecodeIndex(bytes, "m").status();
  EXPECT_NE(whole.message().find("sorted and unique"), std::string::npos);
  EXPECT_EQ(DecodeIndex(bytes, "m", &keep).status().ToString(), whole.ToString());
}

TEST(ManifestIndexKeepTest, APartialMergeHoldsTheSameRecordsOfItsKeysAsTheWholeOne) {
  std::mt19937_64 rng(1131);
  const Manifest m = KeepManifest(rng);
  const SplitResult split = SplitManifest(m, 200, 100);
  const std::string bytes = EncodeIndex(split.index);
  // Rows 0-3 of three keys, all of a fourth (every part read).
  std::vector<KeyBoxes> boxes;
  for (int i : {104, 111, 125, 133}) {
    const std::string key = "layers." + std::to_string(i) + ".w";
    const TensorRecord& t = m.tensors[m.FindTensor(key)];
    boxes.push_back(
        {key,
         {i == 125 ? Box({0, 0}, t.shape) : Box({0, 1}, {std::min<int64_t>(t.shape[0], 4), 2})}});
  }
  std::vector<std::string> keys;
  for (const KeyBoxes& kb : boxes) keys.push_back(kb.key);
  const IndexKeep keep{&keys, 2, 0};
  Result<ManifestIndex> whole = DecodeIndex(bytes, "m");
  Result<ManifestIndex> mine = DecodeIndex(bytes, "m", &keep);
  ASSERT_TRUE(whole.ok() && mine.ok());
  size_t cut = 0;
  for (const TensorEntry& e : mine->tensors) cut += e.parts.size() > 1 ? 1 : 0;
  EXPECT_GT(cut, 0u);
  const std::vector<uint32_t> shards = ShardsForBoxes(*whole, boxes, {});
  ASSERT_EQ(ShardsForBoxes(*mine, boxes, {}), shards);
  uint64_t records_whole = 0, records_mine = 0;
  Result<Manifest> a = MergeShards(*whole, Given(split, shards), kDir, &boxes, &records_whole);
  Result<Manifest> b = MergeShards(*mine, Given(split, shards), kDir, &boxes, &records_mine);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(records_mine, records_whole);
  EXPECT_GT(records_whole, 0u);
  ASSERT_EQ(b->tensors.size(), 4u);
  EXPECT_EQ(a->tensors.size(), 40u);
  for (const TensorRecord& t : b->tensors) {
    const TensorRecord& u = a->tensors[a->FindTensor(t.key)];
    EXPECT_EQ(t.shape, u.shape);
    ASSERT_EQ(t.chunks.size(), u.chunks.size()) << t.key;
    EXPECT_GT(t.chunks.size(), 0u) << t.key;
    for (size_t c = 0; c < t.chunks.size(); ++c) {
      EXPECT_EQ(t.chunks[c].box, u.chunks[c].box);
      EXPECT_EQ(b->files[t.chunks[c].file], a->files[u.chunks[c].file]);
      EXPECT_EQ(t.chunks[c].checksum, u.chunks[c].checksum);
    }
  }
  // A kept key's record that disagrees with its entry is still DataLoss.
  ManifestIndex lying = *mine;
  ASSERT_EQ(lying.tensors[2].key, "layers.125.w");
  lying.tensors[2].parts[0].num_chunks += 1;
  Status s = MergeShards(lying, Given(split, shards), kDir, &boxes).status();
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("tensor '" + lying.tensors[2].key), std::string::npos) << s.ToString();
}

}  // namespace
}  // namespace shardpoint::internal_format
