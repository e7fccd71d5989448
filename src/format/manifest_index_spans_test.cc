// The parts' spans held flat (TensorEntry::spans: one array per tensor, not
// two heap vectors per part): each decoded span is the bounding box of its
// part's chunks, a single part has none (the whole tensor), and the spans
// still choose the shards a rank reads (ShardsForBoxes) so that a partial
// merge holds exactly the whole merge's chunks that meet the rank's boxes.
#include <gtest/gtest.h>

#include <random>

#include "src/format/manifest_index.h"

namespace shardpoint::internal_format {
namespace {

// Tensors of R x C elements in chunks of a few rows each, one file.
Manifest RowChunks(std::mt19937& rng, int keys) {
  Manifest m;
  m.files = {"data/0.safetensors"};
  for (int k = 0; k < keys; ++k) {
    TensorRecord t{"t" + std::to_string(10 + k), DType::kF32, {40 + k * 7, 3}, {}};
    for (int64_t r = 0; r < t.shape[0];) {
      const int64_t n = std::min<int64_t>(t.shape[0] - r, 1 + rng() % 5);
      ChunkRecord c;
      c.box = Box({r, 0}, {n, 3});
      c.offset = rng() % 100000, c.nbytes = static_cast<uint64_t>(n * 12), c.checksum = rng();
      c.block_sums = {static_cast<uint64_t>(rng())};
      t.chunks.push_back(c);
      r += n;
    }
    m.tensors.push_back(std::move(t));
  }
  return m;
}

TEST(ManifestIndexSpansTest, DecodedSpansAreTheirPartsBoundingBoxesHeldFlat) {
  std::mt19937 rng(4141);
  const Manifest m = RowChunks(rng, 6);
  const SplitResult split = SplitManifest(m, 200, 200);
  Result<ManifestIndex> idx = DecodeIndex(EncodeIndex(split.index), "m");
  ASSERT_TRUE(idx.ok()) << idx.status().ToString();
  size_t cut = 0;
  for (size_t i = 0; i < m.tensors.size(); ++i) {
    const TensorRecord& t = m.tensors[i];
    const TensorEntry& e = idx->tensors[i];
    const size_t parts = e.parts.size();
    EXPECT_EQ(e.spans.size(), parts > 1 ? 2 * t.shape.size() * parts : 0u) << t.key;
    cut += parts > 1 ? 1 : 0;
    size_t c = 0;
    for (size_t p = 0; p < parts; ++p) {
      const size_t end = c + e.parts[p].num_chunks;
      ASSERT_LE(end, t.chunks.size());
      const int64_t lo = t.chunks[c].box.offset[0];
      const int64_t hi = t.chunks[end - 1].box.offset[0] + t.chunks[end - 1].box.shape[0];
      EXPECT_EQ(e.span(p), parts > 1 ? Box({lo, 0}, {hi - lo, 3}) : Box::Whole(t.shape))
          << t.key << " part " << p;
      c = end;
    }
    EXPECT_EQ(c, t.chunks.size()) << t.key;
  }
  EXPECT_GE(cut, 4u);  // most tensors are cut into parts
}

TEST(ManifestIndexSpansTest, APartialMergeOverSpansHoldsExactlyTheChunksMeetingTheBoxes) {
  std::mt19937 rng(4242);
  const Manifest m = RowChunks(rng, 5);
  const SplitResult split = SplitManifest(m, 200, 200);
  Result<ManifestIndex> idx = DecodeIndex(EncodeIndex(split.index), "m");
  ASSERT_TRUE(idx.ok()) << idx.status().ToString();
  Result<Manifest> whole = MergeShards(
      *idx,
      [&] {
        std::vector<std::pair<uint32_t, std::string>> all;
        for (size_t s = 0; s < split.shards.size(); ++s) all.emplace_back(s, split.shards[s]);
        return all;
      }(),
      "d");
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  for (int trial = 0; trial < 20; ++trial) {
    const TensorRecord& t = m.tensors[rng() % m.tensors.size()];
    const int64_t row = rng() % t.shape[0];
    const Box want({row, 1}, {1, 1});
    std::vector<std::pair<uint32_t, std::string>> have;
    for (uint32_t s : ShardsForBoxes(*idx, {{t.key, {want}}}, {})) {
      have.emplace_back(s, split.shards[s]);
    }
    Result<Manifest> part = MergeShards(*idx, have, "d");
    ASSERT_TRUE(part.ok()) << part.status().ToString();
    const int64_t k = part->FindTensor(t.key);
    ASSERT_GE(k, 0);
    const std::vector<ChunkRecord>& got = part->tensors[k].chunks;
    // Exactly one part meets a one-element box: its chunks, bit for bit the
    // whole merge's, and among them the chunk holding the row.
    ASSERT_EQ(have.size(), 1u) << t.key << " row " << row;
    bool holds = false;
    size_t at = 0;
    const std::vector<ChunkRecord>& all = whole->tensors[k].chunks;
    while (at < all.size() && !(all[at].box == got.front().box)) ++at;
    ASSERT_LE(at + got.size(), all.size());
    for (size_t j = 0; j < got.size(); ++j) {
      const ChunkRecord& a = all[at + j];
      EXPECT_TRUE(a.box == got[j].box && a.offset == got[j].offset &&
                  a.checksum == got[j].checksum && a.block_sums == got[j].block_sums &&
                  whole->files[a.file] == part->files[got[j].file]);
      const int64_t r0 = got[j].box.offset[0];
      holds |= r0 <= row && row < r0 + got[j].box.shape[0];
    }
    EXPECT_TRUE(holds) << t.key << " row " << row;
  }
}

}  // namespace
}  // namespace shardpoint::internal_format
