// Save's commit (src/checkpoint/owner_commit.h): the keys' owners write their
// records as manifest shards, so rank 0 receives the index and the objects,
// not every chunk record; a small manifest stays one version 2 file; either
// loads bit for bit under another layout, and verify reads every shard.
#include <gtest/gtest.h>

#include <random>
#include <set>
#include <string>
#include <vector>

#include "shardpoint/checkpoint.h"
#include "shardpoint/plan_cache.h"
#include "shardpoint/verify.h"
#include "src/checkpoint/manifest_io.h"
#include "src/format/manifest_index.h"
#include "src/io/mem_storage.h"
#include "tests/testing/gather_counting_comm.h"

namespace shardpoint {
namespace {

using internal_checkpoint::ManifestSharding;

constexpr int kRows = 480, kCols = 4;

// Every key "w<k>" is [kRows, kCols] f32 with seeded values; `ranks` ranks
// hold equal row blocks, each row its own segment (a chunk of its own when
// saved), so the manifest has keys x kRows chunk records.
struct Layout {
  int ranks, keys;
  std::vector<std::vector<float>> mem;  // per key, this rank's rows
  State state;
};

std::vector<float> Values(int key) {
  std::mt19937 rng(1000 + key);
  std::vector<float> v(kRows * kCols);
  for (float& x : v) x = static_cast<float>(rng() % 100000) / 7.0f;
  return v;
}

Layout Make(int ranks, int rank, int keys, bool fill, bool one_segment) {
  Layout l{ranks, keys, {}, {}};
  const int rows = kRows / ranks, first = rank * rows;
  l.mem.reserve(keys);
  for (int k = 0; k < keys; ++k) {
    const std::vector<float> all = Values(k);
    l.mem.emplace_back(rows * kCols, 0.0f);
    if (fill) std::copy_n(all.begin() + first * kCols, rows * kCols, l.mem.back().begin());
    LocalTensor t;
    t.dtype = DType::kF32;
    t.data = l.mem.back().data();
    t.shape = {rows, kCols};
    const std::string key = "w" + std::to_string(k);
    if (one_segment) {
      t.segments.push_back(Segment{key, {kRows, kCols}, Box{{first, 0}, {rows, kCols}}, {0, 0}});
    }
    for (int i = 0; !one_segment && i < rows; ++i) {
      t.segments.push_back(Segment{key, {kRows, kCols}, Box{{first + i, 0}, {1, kCols}}, {i, 0}});
    }
    l.state.tensors.push_back(t);
  }
  return l;
}

class OwnerCommitTest : public ::testing::Test {
 protected:
  void TearDown() override { internal_checkpoint::SetManifestSharding(ManifestSharding{}); }

  // Saves `keys` keys from 8 ranks; returns the bytes rank 0 received by
  // Gather (the cache agreement and the commit messages).
  uint64_t Save8(const std::string& dir, int keys, std::vector<SavePlanCache>* caches = nullptr) {
    uint64_t gathered = 0;
    std::vector<Layout> src;
    for (int r = 0; r < 8; ++r) src.push_back(Make(8, r, keys, true, false));
    std::vector<Status> all = RunThreadRanks(8, [&](Comm& comm) {
      testing::GatherCountingComm counting(comm);
      SaveOptions o;
      o.storage = mem_.get();
      if (caches) o.plan_cache = &(*caches)[comm.rank()];
      Status s = Save(src[comm.rank()].state, dir, counting, o).status();
      if (comm.rank() == 0) gathered = counting.from_others;
      return s;
    });
    for (const Status& s : all) EXPECT_TRUE(s.ok()) << s.ToString();
    return gathered;
  }

  // Loads every key under 3 ranks, one row block each: bit for bit.
  void ExpectLoads(const std::string& dir, int keys) {
    std::vector<Layout> dst;
    for (int r = 0; r < 3; ++r) dst.push_back(Make(3, r, keys, false, true));
    std::vector<Status> all = RunThreadRanks(3, [&](Comm& comm) {
      LoadOptions o;
      o.storage = mem_.get();
      return Load(dst[comm.rank()].state, dir, comm, o).status();
    });
    for (const Status& s : all) ASSERT_TRUE(s.ok()) << s.ToString();
    for (int r = 0; r < 3; ++r) {
      for (int k = 0; k < keys; ++k) {
        const std::vector<float> want = Values(k);
        const int rows = kRows / 3;
        ASSERT_TRUE(
            std::equal(dst[r].mem[k].begin(), dst[r].mem[k].end(), want.begin() + r * rows * kCols))
            << dir << ": rank " << r << " key w" << k;
      }
    }
    VerifyOptions vo;
    vo.storage = mem_.get();
    Result<VerifyReport> v = VerifyCheckpoint(dir, vo);
    ASSERT_TRUE(v.ok()) << v.status().ToString();
    EXPECT_TRUE(v->ok()) << (v->faults.empty() ? "" : v->faults[0].message);
    EXPECT_EQ(v->chunks_checked, int64_t{keys} * kRows);
  }

  std::string Top(const std::string& dir) {
    Result<std::string> top = mem_->ReadFileToString(dir + "/manifest");
    EXPECT_TRUE(top.ok()) << top.status().ToString();
    return top.ok() ? *top : "";
  }

  std::unique_ptr<Storage> mem_ = NewMemStorage();
};

TEST_F(OwnerCommitTest, Rank0ReceivesTheIndexNotTheChunkRecords) {
  // 32 keys x 480 one-row chunks: about 1.2 MB of shards.
  internal_checkpoint::SetManifestSharding(ManifestSharding{64 << 10, 8 << 10, 8 << 10});
  const uint64_t gathered = Save8("/a", 32);
  const std::string top = Top("/a");
  ASSERT_EQ(internal_format::EncodedVersion(top), internal_format::kIndexVersion);
  Result<internal_format::ManifestIndex> index = internal_format::DecodeIndex(top, "manifest");
  ASSERT_TRUE(index.ok()) << index.status().ToString();
  // The owners of the keys (other than rank 0) wrote their shards.
  std::set<std::string> owners;
  uint64_t shard_bytes = 0;
  for (const internal_format::ShardRef& s : index->shards) {
    shard_bytes += s.nbytes;
    owners.insert(internal_format::ShardFileName(index->shard_files[s.file]));
  }
  EXPECT_GE(owners.size(), 4u);
  for (const std::string& f : owners) {
    Result<bool> there = mem_->Exists("/a/" + f);
    EXPECT_TRUE(there.ok() && *there) << f;
  }
  // Before, rank 0 received every chunk's box, place and checksums (over
  // 40 bytes each: more than a third of the shards' bytes); now the owners'
  // index entries.
  EXPECT_GT(shard_bytes, 1'000'000u);
  EXPECT_LT(gathered * 20, shard_bytes) << "rank 0 received " << gathered << " bytes";
  ExpectLoads("/a", 32);

  // With every rank's plan cached, the owners keep their records and rank 0
  // its objects: the second save sends no structure, and loads alike.
  std::vector<SavePlanCache> caches(8);
  Save8("/b", 32, &caches);
  const uint64_t cached = Save8("/c", 32, &caches);
  EXPECT_EQ(caches[0].hits(), 1);
  EXPECT_LE(cached, gathered);
  ExpectLoads("/c", 32);
}

TEST_F(OwnerCommitTest, ASmallManifestIsOneVersion2FileWrittenByRank0) {
  Save8("/small", 2);  // 960 chunk records: under the 1 MiB threshold
  EXPECT_EQ(internal_format::EncodedVersion(Top("/small")), 2u);
  Result<std::vector<std::string>> names = mem_->ListDir("/small/data");
  ASSERT_TRUE(names.ok());
  for (const std::string& n : *names) EXPECT_TRUE(n.ends_with(".safetensors")) << n;
  ExpectLoads("/small", 2);
}

}  // namespace
}  // namespace shardpoint
