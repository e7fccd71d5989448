// Format v3 end to end on the real filesystem: a save writes an index and
// manifest shards; a load under any rank count reads the index once and each
// shard it needs at most once (metadata reads counted by a storage wrapper),
// and loads bit for bit; a bad shard fails every rank naming it.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "shardpoint/checkpoint.h"
#include "shardpoint/verify.h"
#include "src/checkpoint/manifest_fetch.h"
#include "src/checkpoint/manifest_io.h"
#include "src/format/manifest_index.h"
#include "src/source/manifest_read.h"
#include "tests/testing/reference.h"
#include "tests/testing/transformer.h"

namespace shardpoint {
namespace {

using internal_checkpoint::ManifestSharding;
using testing::ParallelConfig;

// Counts the reads of the manifest and of the manifest shards (in
// data/manifest.shards or, v6, any data/manifest.<rank>.shards).
class MetadataCounter : public StorageWrapper {
 public:
  using StorageWrapper::StorageWrapper;
  std::atomic<int> manifest_reads{0}, shard_reads{0};

  Result<std::unique_ptr<ReadableFile>> NewReadableFile(const std::string& path) override {
    SP_ASSIGN_OR_RETURN(std::unique_ptr<ReadableFile> f, StorageWrapper::NewReadableFile(path));
    const bool shards =
        path.find("/data/manifest.") != std::string::npos && path.ends_with(".shards");
    std::atomic<int>* count = path.ends_with("/manifest") ? &manifest_reads
                              : shards                    ? &shard_reads
                                                          : nullptr;
    return std::unique_ptr<ReadableFile>(new Counting(std::move(f), count));
  }

 private:
  class Counting : public ReadableFileWrapper {
   public:
    Counting(std::unique_ptr<ReadableFile> f, std::atomic<int>* count)
        : ReadableFileWrapper(std::move(f)), count_(count) {}
    Status ReadAt(uint64_t offset, size_t n, void* dst) const override {
      if (count_ != nullptr) ++*count_;
      return ReadableFileWrapper::ReadAt(offset, n, dst);
    }

   private:
    std::atomic<int>* count_;
  };
};

Status First(const std::vector<Status>& all) {
  for (const Status& s : all) {
    if (!s.ok()) return s;
  }
  return OkStatus();
}

class ShardedManifestTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/shardpoint_sharded_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    dir_ = root_ + "/ckpt";
    internal_checkpoint::SetManifestSharding(ManifestSharding{0, 4096});
  }
  void TearDown() override {
    internal_checkpoint::SetManifestSharding(ManifestSharding{});
    internal_checkpoint::SetCooperativeManifestBytes(
        internal_checkpoint::kCooperativeManifestBytes);
    ASSERT_TRUE(DefaultStorage()->RemoveAll(root_).ok());
  }
  // Saves the reference model under `p` into `dir`.
  void SaveModel(const ParallelConfig& p, const std::string& dir) {
    std::vector<testing::RankState> src(p.world());
    for (int r = 0; r < p.world(); ++r) {
      auto rs = testing::BuildRankState(model_, p, r);
      ASSERT_TRUE(rs.ok()) << rs.status().ToString();
      src[r] = std::move(*rs);
      ASSERT_TRUE(testing::FillFromReference(ref_, src[r].state.tensors).ok());
    }
    ASSERT_TRUE(First(RunThreadRanks(p.world(), [&](Comm& comm) {
                  return Save(src[comm.rank()].state, dir, comm).status();
                })).ok());
  }
  // Loads under `p` through `storage`; every rank's status.
  std::vector<Status> LoadModel(const ParallelConfig& p, Storage* storage, bool check = true,
                                bool cooperative = true) {
    std::vector<testing::RankState> dst(p.world());
    for (int r = 0; r < p.world(); ++r) {
      auto rs = testing::BuildRankState(model_, p, r);
      EXPECT_TRUE(rs.ok());
      dst[r] = std::move(*rs);
      dst[r].state.objects.clear();
    }
    LoadOptions o;
    o.storage = storage;
    o.allow_unexpected_keys = true;
    o.cooperative = cooperative;
    received_.assign(p.world(), 0);
    chunks_.assign(p.world(), 0);
    from_ranks_.assign(p.world(), 0);
    std::vector<Status> out = RunThreadRanks(p.world(), [&](Comm& comm) {
      Result<LoadResult> res = Load(dst[comm.rank()].state, dir_, comm, o);
      received_[comm.rank()] = internal_checkpoint::LastFetchStats().bytes_received;
      chunks_[comm.rank()] = internal_checkpoint::LastFetchStats().chunks_received;
      if (res.ok()) from_ranks_[comm.rank()] = res->bytes_received;
      return res.status();
    });
    for (int r = 0; check && First(out).ok() && r < p.world(); ++r) {
      Status c = testing::CheckAgainstReference(ref_, dst[r].state.tensors);
      EXPECT_TRUE(c.ok()) << "rank " << r << ": " << c.ToString();
    }
    return out;
  }
  internal_format::ManifestIndex Index() {
    Result<std::string> top = DefaultStorage()->ReadFileToString(dir_ + "/manifest");
    EXPECT_TRUE(top.ok());
    Result<internal_format::ManifestIndex> idx = internal_format::DecodeIndex(*top, "manifest");
    EXPECT_TRUE(idx.ok()) << idx.status().ToString();
    return idx.ok() ? *idx : internal_format::ManifestIndex{};
  }

  testing::ModelConfig model_{4, 64, 256, 1000};
  testing::RefModel ref_ = testing::MakeReference(model_, 41);
  std::string root_, dir_;
  std::vector<uint64_t> received_;    // manifest shard bytes each rank got
  std::vector<uint64_t> chunks_;      // and the chunk records in them
  std::vector<uint64_t> from_ranks_;  // data bytes each rank got from other ranks
};

TEST_F(ShardedManifestTest, LoadsBitForBitReadingTheIndexOnceAndEachShardAtMostOnce) {
  SaveModel(ParallelConfig{2, 2, 2, true}, dir_);
  const internal_format::ManifestIndex index = Index();
  ASSERT_GT(index.shards.size(), 8u);  // a v3 index with many shards
  for (const ParallelConfig& p : {ParallelConfig{1, 1, 1, false}, ParallelConfig{1, 2, 2, true},
                                  ParallelConfig{2, 2, 4, true}}) {
    MetadataCounter counter(DefaultStorage());
    Status s = First(LoadModel(p, &counter));
    ASSERT_TRUE(s.ok()) << p.ToString() << ": " << s.ToString();
    // The manifest file is read by rank 0 only (one ReadAt for the whole file).
    EXPECT_EQ(counter.manifest_reads.load(), 1) << p.ToString();
    // Each shard is read at most once, by one reader, whatever the rank count.
    EXPECT_GE(counter.shard_reads.load(), 1) << p.ToString();
    EXPECT_LE(counter.shard_reads.load(), static_cast<int>(index.shards.size())) << p.ToString();
  }
}

TEST_F(ShardedManifestTest, ARankGetsOnlyTheShardsOfItsKeys) {
  // One record a shard: a rank's keys are not contiguous in key order
  // (optimizer state keys interleave the stages), so only small shards
  // separate them at this model's size.
  internal_checkpoint::SetManifestSharding(ManifestSharding{0, 1});
  SaveModel(ParallelConfig{2, 2, 2, true}, dir_);
  const internal_format::ManifestIndex index = Index();
  uint64_t total = 0;
  for (const auto& s : index.shards) total += s.nbytes;
  // Not cooperative: a pipeline stage holds half the layers, so each rank
  // gets about half the records (plus the shared embeddings' shards).
  MetadataCounter counter(DefaultStorage());
  Status s = First(LoadModel(ParallelConfig{1, 2, 2, true}, &counter, true, false));
  ASSERT_TRUE(s.ok()) << s.ToString();
  for (size_t r = 0; r < received_.size(); ++r) {
    EXPECT_GT(received_[r], 0u) << "rank " << r;
    EXPECT_LT(received_[r], total * 3 / 4) << "rank " << r << " of " << total;
  }
  EXPECT_EQ(counter.manifest_reads.load(), 1);
  EXPECT_LE(counter.shard_reads.load(), static_cast<int>(index.shards.size()));
}

// Each saving rank's "rng_state" object, in runs of a few a shard: a rank
// loading only its own object gets the one shard of its run (not every run
// of the key; a cooperative load, the runs of every rank's objects), loads
// its bytes, and the keys no rank asked for are named once each, the object
// key among them when no rank asks for it.
TEST_F(ShardedManifestTest, ARankLoadingItsObjectGetsTheOneShardOfItsRun) {
  internal_checkpoint::SetManifestSharding(ManifestSharding{0, 128});
  const ParallelConfig saved{2, 2, 2, true};
  SaveModel(saved, dir_);
  size_t runs = 0;
  for (const auto& run : Index().objects) runs += run.key == "rng_state" ? 1 : 0;
  ASSERT_GT(runs, 2u);
  const int world = 4;
  std::vector<State> st(world);
  std::vector<LoadResult> results(world);
  std::vector<uint64_t> shards(world);
  LoadOptions o;
  o.allow_unexpected_keys = true;
  auto load = [&](bool objects) {
    for (int r = 0; r < world; ++r) {
      st[r] = State();
      if (objects) st[r].objects.push_back(Object{"rng_state", "", {2 * r + 1}, {saved.world()}});
    }
    return First(RunThreadRanks(world, [&](Comm& comm) -> Status {
      Result<LoadResult> res = Load(st[comm.rank()], dir_, comm, o);
      shards[comm.rank()] = internal_checkpoint::LastFetchStats().shards_received;
      if (res.ok()) results[comm.rank()] = *res;
      return res.status();
    }));
  };
  for (bool cooperative : {false, true}) {
    o.cooperative = cooperative;
    Status s = load(true);
    ASSERT_TRUE(s.ok()) << s.ToString();
    for (int r = 0; r < world; ++r) {
      if (!cooperative) {
        EXPECT_EQ(shards[r], 1u) << "rank " << r << " of " << runs << " runs";
      }
      EXPECT_LE(shards[r], runs) << "rank " << r;
      EXPECT_EQ(st[r].objects[0].bytes, "rng-of-rank-" + std::to_string(2 * r + 1));
      const auto& u = results[r].unexpected_keys;
      EXPECT_EQ(std::count(u.begin(), u.end(), "rng_state"), 0) << "rank " << r;
      EXPECT_GT(u.size(), 8u);  // every tensor key
    }
    s = load(false);
    ASSERT_TRUE(s.ok()) << s.ToString();
    for (int r = 0; r < world; ++r) {
      const auto& u = results[r].unexpected_keys;
      EXPECT_EQ(std::count(u.begin(), u.end(), "rng_state"), 1) << "rank " << r;
    }
  }
}

// A loading rank builds only its own keys' entries of the index; the keys no
// rank requested are named by their owners in the request check (key number
// mod ranks), and every rank returns exactly those; a strict load fails
// every rank alike, naming them.
TEST_F(ShardedManifestTest, EveryRankNamesExactlyTheKeysNoRankRequested) {
  SaveModel(ParallelConfig{2, 1, 2, true}, dir_);
  std::vector<std::string> stored;
  for (const auto& t : Index().tensors) stored.push_back(t.key);
  ASSERT_GT(stored.size(), 12u);
  // No rank requests every third stored key; rank 1 alone also drops one
  // key that the others request (so it is not unexpected).
  std::vector<std::string> dropped;
  for (size_t i = 0; i < stored.size(); i += 3) dropped.push_back(stored[i]);
  std::vector<std::string> unexpected = dropped;  // and the objects, which no rank loads
  unexpected.push_back("rng_state");
  std::sort(unexpected.begin(), unexpected.end());
  auto drop = [&](const LocalTensor& lt, int r) {
    const std::string& k = lt.segments.at(0).key;
    return std::binary_search(dropped.begin(), dropped.end(), k) || (r == 1 && k == stored[1]);
  };
  const ParallelConfig load{1, 1, 3, true};
  for (bool strict : {false, true}) {
    std::vector<testing::RankState> dst(load.world());
    for (int r = 0; r < load.world(); ++r) {
      auto rs = testing::BuildRankState(model_, load, r);
      ASSERT_TRUE(rs.ok());
      dst[r] = std::move(*rs);
      dst[r].state.objects.clear();
      auto& ts = dst[r].state.tensors;
      ts.erase(
          std::remove_if(ts.begin(), ts.end(), [&](const LocalTensor& lt) { return drop(lt, r); }),
          ts.end());
    }
    LoadOptions o;
    o.allow_unexpected_keys = !strict;
    o.cooperative = false;
    std::vector<LoadResult> results(load.world());
    std::vector<Status> st = RunThreadRanks(load.world(), [&](Comm& comm) {
      Result<LoadResult> res = Load(dst[comm.rank()].state, dir_, comm, o);
      if (res.ok()) results[comm.rank()] = *res;
      return res.status();
    });
    for (int r = 0; r < load.world(); ++r) {
      if (strict) {
        EXPECT_EQ(st[r].code(), StatusCode::kInvalidArgument) << st[r].ToString();
        EXPECT_EQ(st[r].ToString(), st[0].ToString());
        EXPECT_NE(st[r].message().find("holds keys no rank requested: '" + dropped[0] + "', '" +
                                       dropped[1] + "'"),
                  std::string::npos)
            << st[r].ToString();
        continue;
      }
      ASSERT_TRUE(st[r].ok()) << st[r].ToString();
      EXPECT_EQ(results[r].unexpected_keys, unexpected) << "rank " << r;
      Status c = testing::CheckAgainstReference(ref_, dst[r].state.tensors);
      EXPECT_TRUE(c.ok()) << "rank " << r << ": " << c.ToString();
    }
  }
}

// A cooperative load needs every rank's records on every rank: where the
// shards exceed the limit (64 MiB; lowered here), the default load gets only
// its own keys' shards, as a non-cooperative one, reads alone (no bytes from
// other ranks) and loads bit for bit; under the limit it exchanges.
TEST_F(ShardedManifestTest, ACooperativeLoadOfAManifestOverTheLimitReadsAlone) {
  internal_checkpoint::SetManifestSharding(ManifestSharding{0, 1});
  SaveModel(ParallelConfig{2, 2, 2, true}, dir_);
  const ParallelConfig load{1, 2, 2, true};  // DP 2: both replicas need each block
  ASSERT_TRUE(First(LoadModel(load, DefaultStorage(), true, true)).ok());
  const std::vector<uint64_t> coop = received_, coop_from = from_ranks_;
  ASSERT_TRUE(First(LoadModel(load, DefaultStorage(), true, false)).ok());
  const std::vector<uint64_t> alone = received_;
  internal_checkpoint::SetCooperativeManifestBytes(1);
  Status s = First(LoadModel(load, DefaultStorage(), true, true));
  ASSERT_TRUE(s.ok()) << s.ToString();
  uint64_t exchanged = 0;
  for (int r = 0; r < load.world(); ++r) {
    exchanged += coop_from[r];
    EXPECT_EQ(received_[r], alone[r]) << "rank " << r;
    EXPECT_LT(received_[r], coop[r]) << "rank " << r;
    EXPECT_EQ(from_ranks_[r], 0u) << "rank " << r;
  }
  EXPECT_GT(exchanged, 0u);  // under the limit, the same load exchanged blocks
}

// v4: a large record is cut into parts by chunk range; a rank loading a
// flat shard of each tensor (distributed optimizer, DP 4) gets the parts
// that overlap its boxes, not its keys' whole records, and loads bit for bit.
// (Counted in chunk records: at this model's size a part's own header, the
// key and file names, outweighs its few chunks; at scale parts are 16 KiB.)
TEST_F(ShardedManifestTest, ARankGetsOnlyThePartsOfItsKeysRecordsThatOverlapItsBoxes) {
  const ParallelConfig load{1, 1, 4, true};
  auto received = [&](uint64_t part_bytes) {
    internal_checkpoint::SetManifestSharding(ManifestSharding{0, 128, part_bytes});
    EXPECT_TRUE(DefaultStorage()->RemoveAll(dir_).ok());
    SaveModel(ParallelConfig{2, 1, 4, true}, dir_);
    Status s = First(LoadModel(load, DefaultStorage(), true, false));
    EXPECT_TRUE(s.ok()) << s.ToString();
    return chunks_;
  };
  const std::vector<uint64_t> whole = received(uint64_t{1} << 30);
  const std::vector<uint64_t> parts = received(128);
  size_t multi = 0;
  for (const auto& t : Index().tensors) multi += t.parts.size() > 1 ? 1 : 0;
  EXPECT_GT(multi, 8u);  // the optimizer state's records are in parts
  for (int r = 0; r < load.world(); ++r) {
    EXPECT_GT(parts[r], 0u) << "rank " << r;
    EXPECT_LT(parts[r] * 2, whole[r]) << "rank " << r;
  }
  // A cooperative load (every rank plans every rank's pieces) still loads.
  Status s = First(LoadModel(ParallelConfig{2, 1, 2, true}, DefaultStorage()));
  EXPECT_TRUE(s.ok()) << s.ToString();
}

TEST_F(ShardedManifestTest, VerifyAndDescribeSeeTheWholeManifest) {
  SaveModel(ParallelConfig{2, 2, 2, true}, dir_);
  ASSERT_GT(Index().shards.size(), 8u);
  // The same save with one v2 manifest: the whole of the v3 one equals it.
  internal_checkpoint::SetManifestSharding(ManifestSharding{});
  SaveModel(ParallelConfig{2, 2, 2, true}, root_ + "/v2");
  Result<std::string> v2 = DefaultStorage()->ReadFileToString(root_ + "/v2/manifest");
  ASSERT_TRUE(v2.ok());
  ASSERT_EQ(internal_format::EncodedVersion(*v2), 2u);
  Result<internal_format::Manifest> whole = internal_source::ReadManifest(DefaultStorage(), dir_);
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  Result<internal_format::Manifest> old = internal_format::DecodeManifest(*v2, "v2");
  ASSERT_TRUE(old.ok());
  EXPECT_EQ(internal_format::EncodeManifest(*whole),
            internal_format::EncodeManifest(internal_format::CanonicalFileOrder(*old)));
  Result<CheckpointDescription> d = DescribeCheckpoint(dir_);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->tensors.size(), old->tensors.size());
  EXPECT_EQ(d->format_version, internal_format::kIndexVersion);
  Result<VerifyReport> report = VerifyCheckpoint(dir_);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_TRUE(report->ok());
}

// Format v6: the shards in three owners' files (each owner's keys dealt at
// random, so a shard holds keys not adjacent in key order) and no
// data/manifest.shards; loads, verify and describe read them.
TEST_F(ShardedManifestTest, AVersion6IndexOverSeveralShardFilesLoadsBitForBit) {
  SaveModel(ParallelConfig{2, 2, 2, true}, dir_);
  Result<internal_format::Manifest> m = internal_source::ReadManifest(DefaultStorage(), dir_);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  std::mt19937_64 rng(66);
  std::vector<internal_format::Manifest> owned(3);
  for (internal_format::Manifest& o : owned) o.files = m->files, o.block_size = m->block_size;
  for (const auto& t : m->tensors) owned[rng() % 3].tensors.push_back(t);
  for (const auto& o : m->objects) owned[rng() % 3].objects.push_back(o);
  std::vector<internal_format::ManifestIndex> parts;
  for (int p = 0; p < 3; ++p) {
    const std::string file = "data/manifest." + std::to_string(p) + ".shards";
    internal_format::SplitResult split =
        internal_format::SplitManifest(owned[p], 2048, 2048, static_cast<uint32_t>(p));
    std::string bytes;
    for (const std::string& s : split.shards) bytes += s;
    ASSERT_TRUE(DefaultStorage()->WriteStringToFile(dir_ + "/" + file, bytes).ok());
    parts.push_back(std::move(split.index));
  }
  Result<internal_format::ManifestIndex> index = internal_format::CombineIndexes(parts);
  ASSERT_TRUE(index.ok()) << index.status().ToString();
  ASSERT_EQ(index->shard_files.size(), 3u);
  ASSERT_GT(index->shards.size(), 8u);
  index->has_common = m->has_common;
  index->common = m->common;
  index->metadata_json = m->metadata_json;
  ASSERT_TRUE(DefaultStorage()->RemoveFile(dir_ + "/data/manifest.shards").ok());
  ASSERT_TRUE(DefaultStorage()
                  ->WriteStringToFile(dir_ + "/manifest", internal_format::EncodeIndex(*index))
                  .ok());
  for (const ParallelConfig& p : {ParallelConfig{1, 1, 1, false}, ParallelConfig{1, 2, 2, true},
                                  ParallelConfig{2, 2, 4, true}}) {
    for (bool cooperative : {true, false}) {
      MetadataCounter counter(DefaultStorage());
      Status s = First(LoadModel(p, &counter, true, cooperative));
      ASSERT_TRUE(s.ok()) << p.ToString() << ": " << s.ToString();
      EXPECT_EQ(counter.manifest_reads.load(), 1) << p.ToString();
      EXPECT_GE(counter.shard_reads.load(), 1) << p.ToString();
      EXPECT_LE(counter.shard_reads.load(), static_cast<int>(index->shards.size())) << p.ToString();
    }
  }
  Result<internal_format::Manifest> whole = internal_source::ReadManifest(DefaultStorage(), dir_);
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  EXPECT_EQ(internal_format::EncodeManifest(*whole), internal_format::EncodeManifest(*m));
  Result<CheckpointDescription> d = DescribeCheckpoint(dir_);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->format_version, 6u);
  Result<VerifyReport> report = VerifyCheckpoint(dir_);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_TRUE(report->ok());
}

TEST_F(ShardedManifestTest, ACorruptShardFailsEveryRankNamingIt) {
  SaveModel(ParallelConfig{2, 1, 2, true}, dir_);
  const internal_format::ManifestIndex index = Index();
  ASSERT_GT(index.shards.size(), 2u);
  {
    std::fstream f(dir_ + "/data/manifest.shards", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(index.shards[0].nbytes / 2));
    f.put('\x7f');
  }
  std::vector<Status> all = LoadModel(ParallelConfig{2, 1, 2, true}, DefaultStorage(), false);
  for (const Status& s : all) {
    EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.ToString();
    EXPECT_NE(
        s.message().find("manifest shard '" + dir_ + "/data/manifest.shards shard 0 (bytes [0, " +
                         std::to_string(index.shards[0].nbytes) + "))': checksum mismatch"),
        std::string::npos)
        << s.ToString();
  }
  // verify reads the whole manifest: the same error.
  Result<VerifyReport> report = VerifyCheckpoint(dir_);
  ASSERT_FALSE(report.ok());
  EXPECT_NE(report.status().message().find("shard 0 (bytes [0, "), std::string::npos)
      << report.status().ToString();
}

}  // namespace
}  // namespace shardpoint
