// CombineIndexes: the indexes of disjoint key sets (one per owner rank, each
// split into a shard file of its own) make one index whose shards hold keys
// that are not adjacent in key order; decoding it, whole or keeping a rank's
// keys, and merging its shards give the records of the whole manifest.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "src/format/manifest_index.h"

namespace shardpoint::internal_format {
namespace {

const std::string kDir = "/ckpt/step_8";
constexpr int kParts = 3;

// A seeded v2 manifest: 40 tensors [rows, 3] in chunks of 1 to 6 rows over
// three data files (the larger ones cut into parts by a 300-byte shard),
// objects "rng" [i] of a 90 grid and the unsharded "step".
Manifest TestManifest(std::mt19937_64& rng) {
  Manifest m;
  m.files = {"data/0.safetensors", "data/1.safetensors", "data/2.safetensors"};
  for (int k = 0; k < 40; ++k) {
    TensorRecord t{"layer." + std::to_string(10 + k), DType::kBF16, {}, {}};
    const int64_t rows = 1 + static_cast<int64_t>(rng() % 30);
    t.shape = {rows, 3};
    for (int64_t r = 0; r < rows;) {
      const int64_t n = std::min<int64_t>(rows - r, 1 + static_cast<int64_t>(rng() % 6));
      t.chunks.push_back({Box({r, 0}, {n, 3}),
                          static_cast<uint32_t>(rng() % 3),
                          rng() % 100000,
                          static_cast<uint64_t>(n * 6),
                          rng(),
                          {rng()}});
      r += n;
    }
    m.tensors.push_back(std::move(t));
  }
  for (int64_t i = 0; i < 90; ++i) {
    m.objects.push_back(
        {"rng", {i}, {90}, static_cast<uint32_t>(i % 3), uint64_t(16 * i), 16, rng()});
  }
  m.objects.push_back({"step", {}, {}, 1, 5000, 8, rng()});
  m.has_common = true;
  m.common = "common";
  m.metadata_json = "{\"step\": 8}";
  return CanonicalFileOrder(m);
}

struct Owned {
  ManifestIndex index;                                // combined
  std::vector<std::pair<uint32_t, std::string>> all;  // every shard, numbered as in it
  std::vector<int> tensor_part;                       // m.tensors[i]'s part
};

// `m`'s keys dealt to kParts owners at random (tensors one by one, "rng" in
// runs of 10 indices, "step" to the last), each owner's split into
// data/manifest.<p>.shards, combined.
Owned SplitByOwner(const Manifest& m, std::mt19937_64& rng) {
  std::vector<Manifest> sub(kParts);
  Owned out;
  for (Manifest& s : sub) s.files = m.files, s.block_size = m.block_size;
  for (const TensorRecord& t : m.tensors) {
    out.tensor_part.push_back(static_cast<int>(rng() % kParts));
    sub[out.tensor_part.back()].tensors.push_back(t);
  }
  for (const ObjectRecord& o : m.objects) {
    sub[o.index.empty() ? kParts - 1 : o.index[0] / 10 % kParts].objects.push_back(o);
  }
  std::vector<ManifestIndex> parts;
  std::vector<std::string> shards;
  for (int p = 0; p < kParts; ++p) {
    SplitResult split = SplitManifest(sub[p], 300, 150, static_cast<uint32_t>(p));
    parts.push_back(split.index);
    for (std::string& s : split.shards) shards.push_back(std::move(s));
  }
  Result<ManifestIndex> c = CombineIndexes(parts);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  out.index = *c;
  out.index.has_common = m.has_common;
  out.index.common = m.common;
  out.index.metadata_json = m.metadata_json;
  for (size_t s = 0; s < shards.size(); ++s) out.all.emplace_back(s, shards[s]);
  return out;
}

TEST(ManifestCombineTest, OwnersIndexesCombineIntoTheWholeManifest) {
  std::mt19937_64 rng(808);
  const Manifest m = TestManifest(rng);
  const Owned o = SplitByOwner(m, rng);
  const ManifestIndex& idx = o.index;
  ASSERT_EQ(idx.shard_files, (std::vector<uint32_t>{0, 1, 2}));
  ASSERT_EQ(idx.shards.size(), o.all.size());
  // Shards numbered part after part, each file's back to back from 0.
  std::vector<uint64_t> end(kParts, 0);
  for (size_t s = 0; s < idx.shards.size(); ++s) {
    const ShardRef& r = idx.shards[s];
    EXPECT_TRUE(s == 0 || r.file >= idx.shards[s - 1].file);
    EXPECT_EQ(r.offset, end[r.file]);
    end[r.file] += r.nbytes;
  }
  // Some tensor in parts, and some shard holding keys not adjacent in key order.
  size_t most_parts = 0;
  std::vector<std::vector<size_t>> keys_of(idx.shards.size());
  for (size_t i = 0; i < idx.tensors.size(); ++i) {
    EXPECT_EQ(idx.tensors[i].key, m.tensors[i].key);
    most_parts = std::max(most_parts, idx.tensors[i].parts.size());
    for (const TensorPart& p : idx.tensors[i].parts) keys_of[p.shard].push_back(i);
  }
  EXPECT_GT(most_parts, 2u);
  bool gap = false;
  for (const auto& k : keys_of) {
    for (size_t j = 1; j < k.size(); ++j) gap = gap || k[j] > k[j - 1] + 1;
  }
  EXPECT_TRUE(gap);
  // rng's runs of 10 (from alternating owners) stay apart, in index order.
  size_t rng_runs = 0;
  for (const ObjectRun& r : idx.objects) rng_runs += r.key == "rng" ? 1 : 0;
  EXPECT_GE(rng_runs, 9u);
  // Encoded, decoded and merged: the whole manifest.
  const std::string bytes = EncodeIndex(idx);
  Result<ManifestIndex> back = DecodeIndex(bytes, kDir + "/manifest");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(EncodeIndex(*back), bytes);
  Result<Manifest> merged = MergeShards(*back, o.all, kDir);
  ASSERT_TRUE(merged.ok()) << merged.status().ToString();
  EXPECT_EQ(EncodeManifest(*merged), EncodeManifest(m));
}

// A loading rank: the index decoded keeping its keys, the shards of its
// boxes and objects (ShardsForBoxes), merged with its boxes: exactly the
// chunks of its keys that meet them and its objects, as in the whole manifest.
TEST(ManifestCombineTest, ALoadingRankGetsItsChunksFromTheCombinedIndex) {
  std::mt19937_64 rng(809);
  const Manifest m = TestManifest(rng);
  const Owned o = SplitByOwner(m, rng);
  const std::string bytes = EncodeIndex(o.index);
  for (int trial = 0; trial < 6; ++trial) {
    std::vector<KeyBoxes> want;
    std::vector<std::string> keys;
    for (size_t i = trial; i < m.tensors.size(); i += 3 + trial) {
      const int64_t rows = m.tensors[i].shape[0];
      const int64_t lo = static_cast<int64_t>(rng() % rows);
      want.push_back({m.tensors[i].key, {Box({lo, 1}, {1 + (rows - lo - 1) / 3, 2})}});
      keys.push_back(m.tensors[i].key);
    }
    const std::vector<ObjectAt> objects = {{"rng", {static_cast<int64_t>(rng() % 90)}},
                                           {"step", {}}};
    const IndexKeep keep{&keys, 4, static_cast<uint64_t>(trial % 4)};
    Result<ManifestIndex> part = DecodeIndex(bytes, kDir + "/manifest", &keep);
    ASSERT_TRUE(part.ok()) << part.status().ToString();
    ASSERT_TRUE(part->partial);
    ASSERT_EQ(part->tensors.size(), keys.size());
    const std::vector<uint32_t> shards = ShardsForBoxes(*part, want, objects);
    EXPECT_EQ(ShardsForBoxes(o.index, want, objects), shards);
    std::vector<std::pair<uint32_t, std::string>> have;
    for (uint32_t s : shards) have.push_back(o.all[s]);
    Result<Manifest> mine = MergeShards(*part, have, kDir, &want);
    ASSERT_TRUE(mine.ok()) << mine.status().ToString();
    ASSERT_EQ(mine->tensors.size(), want.size());
    for (size_t k = 0; k < want.size(); ++k) {
      const TensorRecord& got = mine->tensors[k];
      ASSERT_EQ(got.key, want[k].key);
      const TensorRecord& t =
          *std::find_if(m.tensors.begin(), m.tensors.end(),
                        [&](const TensorRecord& x) { return x.key == want[k].key; });
      std::vector<const ChunkRecord*> meet;
      for (const ChunkRecord& c : t.chunks) {
        if (MeetsAny(want[k].boxes, c.box)) meet.push_back(&c);
      }
      ASSERT_EQ(got.chunks.size(), meet.size()) << got.key;
      for (size_t c = 0; c < meet.size(); ++c) {
        const ChunkRecord &a = got.chunks[c], &b = *meet[c];
        EXPECT_EQ(std::tie(a.box, a.offset, a.nbytes, a.checksum, a.block_sums),
                  std::tie(b.box, b.offset, b.nbytes, b.checksum, b.block_sums));
        EXPECT_EQ(mine->files[a.file], m.files[b.file]);
      }
    }
    for (const ObjectAt& at : objects) {
      auto same = [&](const ObjectRecord& r) { return r.key == at.key && r.index == at.index; };
      auto got = std::find_if(mine->objects.begin(), mine->objects.end(), same);
      auto was = std::find_if(m.objects.begin(), m.objects.end(), same);
      ASSERT_NE(got, mine->objects.end()) << at.key;
      EXPECT_EQ(std::tie(got->offset, got->nbytes, got->checksum),
                std::tie(was->offset, was->nbytes, was->checksum));
      EXPECT_EQ(mine->files[got->file], m.files[was->file]);
    }
    // ShardsForKeys: every shard of a key's parts, whichever owner wrote it.
    for (uint32_t s : ShardsForKeys(o.index, keys, {"step"})) EXPECT_LT(s, o.index.shards.size());
  }
}

TEST(ManifestCombineTest, OverlappingOrMismatchedPartsAreInternalErrors) {
  std::mt19937_64 rng(810);
  const Manifest m = TestManifest(rng);
  auto split = [&](size_t t_lo, size_t t_hi, size_t o_lo, size_t o_hi, uint32_t file) {
    Manifest s;
    s.files = m.files;
    s.tensors.assign(m.tensors.begin() + t_lo, m.tensors.begin() + t_hi);
    s.objects.assign(m.objects.begin() + o_lo, m.objects.begin() + o_hi);
    return SplitManifest(s, 300, 150, file).index;
  };
  const ManifestIndex a = split(0, 20, 0, 40, 0);
  const ManifestIndex b = split(20, 40, 40, 91, 1);
  ASSERT_TRUE(CombineIndexes({a, b}).ok());
  // Empty parts (an owner of no key) are allowed and add nothing.
  const ManifestIndex none = split(0, 0, 0, 0, 2);
  EXPECT_TRUE(none.shard_files.empty());
  Result<ManifestIndex> c = CombineIndexes({none, b, ManifestIndex{}, a});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  // Files in writer order; shards in part order (b's first, in file 1).
  EXPECT_EQ(c->shard_files, (std::vector<uint32_t>{0, 1}));
  EXPECT_EQ(c->shards[0].file, 1u);
  EXPECT_EQ(c->shards[b.shards.size()].file, 0u);
  EXPECT_EQ(c->tensors.size(), 40u);
  EXPECT_EQ(c->tensors[0].parts[0].shard, b.shards.size() + a.tensors[0].parts[0].shard);
  EXPECT_TRUE(CombineIndexes({}).ok());
  auto message = [](const std::vector<ManifestIndex>& parts) {
    Result<ManifestIndex> r = CombineIndexes(parts);
    EXPECT_EQ(r.status().code(), StatusCode::kInternal) << r.status().ToString();
    return r.status().message();
  };
  EXPECT_EQ(message({a, split(19, 21, 40, 41, 1)}),
            "CombineIndexes: tensor '" + m.tensors[19].key + "' is in parts 0 and 1");
  EXPECT_EQ(message({a, split(20, 21, 39, 41, 1)}),
            "CombineIndexes: object 'rng' index [39] is in parts 0 and 1");
  EXPECT_EQ(message({a, split(20, 40, 40, 91, 0)}),
            "CombineIndexes: shard file 'data/manifest.0.shards' is in parts 0 and 1");
  ManifestIndex other = b;
  other.block_size *= 2;
  EXPECT_NE(message({a, other}).find("part 1 has block size"), std::string::npos);
  other = b;
  other.version = kIndexVersionV5;
  EXPECT_NE(message({a, other}).find("part 1 is partial or not version 6"), std::string::npos);
  other = b;
  other.shard_files.push_back(9);
  EXPECT_EQ(message({a, other}),
            "CombineIndexes: part 1 shard file 'data/manifest.9.shards' holds no shard");
  other = b;
  other.shards[0].file = 1;
  EXPECT_EQ(message({a, other}), "CombineIndexes: part 1 shard 0 is in shard file 1 of 1");
}

}  // namespace
}  // namespace shardpoint::internal_format
