// A loading rank's decode of the index (DecodeIndex with an IndexKeep): every
// entry checked, only its keys' entries built, numbered as in the whole
// index; and its merge (MergeShards of that partial index), which holds the
// same records of its keys as the whole index's merge.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "src/format/manifest_index.h"

namespace shardpoint::internal_format {
namespace {

const std::string kDir = "/ckpt/step_3";

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

std::vector<std::pair<uint32_t, std::string>> Given(const SplitResult& split,
                                                    const std::vector<uint32_t>& shards) {
  std::vector<std::pair<uint32_t, std::string>> have;
  for (uint32_t s : shards) have.emplace_back(s, split.shards[s]);
  return have;
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
