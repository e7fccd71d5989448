// A sharded manifest (format v3) under mpirun: saved by every process, loaded
// back bit for bit (cooperative and not) with each shard read at most once in
// the whole job (reads counted per process and summed), and a corrupt shard
// fails every process with the same DataLoss naming it; the keys no process
// requested are named exactly on every process.
// Run: mpirun --allow-run-as-root --oversubscribe -np 3 build-test/sharded_manifest_check
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <memory>

#include "shardpoint/checkpoint.h"
#include "src/checkpoint/manifest_io.h"
#include "src/format/manifest_index.h"
#include "tests/mpi/mpi_test_main.h"
#include "tests/testing/reference.h"
#include "tests/testing/transformer.h"

namespace shardpoint {
namespace {

// A manifest shards file: rank 0's data/manifest.shards or an owner's
// data/manifest.<rank>.shards (format v6).
bool IsShardsFile(const std::string& path) {
  return path.find("/data/manifest.") != std::string::npos && path.ends_with(".shards");
}

// Counts the reads of the manifest shards files.
class ShardReads : public StorageWrapper {
 public:
  using StorageWrapper::StorageWrapper;
  std::atomic<int> reads{0};
  Result<std::unique_ptr<ReadableFile>> NewReadableFile(const std::string& path) override {
    SP_ASSIGN_OR_RETURN(std::unique_ptr<ReadableFile> f, StorageWrapper::NewReadableFile(path));
    if (!IsShardsFile(path)) return f;
    return std::unique_ptr<ReadableFile>(new Counting(std::move(f), &reads));
  }

 private:
  class Counting : public ReadableFileWrapper {
   public:
    Counting(std::unique_ptr<ReadableFile> f, std::atomic<int>* n)
        : ReadableFileWrapper(std::move(f)), n_(n) {}
    Status ReadAt(uint64_t offset, size_t len, void* dst) const override {
      ++*n_;
      return ReadableFileWrapper::ReadAt(offset, len, dst);
    }

   private:
    std::atomic<int>* n_;
  };
};

std::string SharedTempDir(Comm& comm) {
  std::string dir;
  if (comm.rank() == 0) {
    char tmpl[] = "/tmp/shardpoint_mpi_sharded_XXXXXX";
    dir = mkdtemp(tmpl) ? tmpl : "";
  }
  EXPECT_TRUE(comm.Broadcast(&dir, 0).ok());
  return dir;
}

// The reference model saved by every process of the job into a sharded
// manifest (records over 256 bytes cut into parts of about 128: format v4),
// and its index.
class ShardedManifest : public ::testing::Test {
 protected:
  void SetUp() override {
    world = MakeMpiComm(MPI_COMM_WORLD);
    ASSERT_NE(world, nullptr);
    n = world->size(), rank = world->rank();
    root = SharedTempDir(*world);
    ASSERT_FALSE(root.empty());
    internal_checkpoint::SetManifestSharding({0, 256, 128});
    p = testing::ParallelConfig{1, 1, n, true};
    auto src = testing::BuildRankState(model, p, rank);
    ASSERT_TRUE(src.ok());
    ASSERT_TRUE(testing::FillFromReference(ref, src->state.tensors).ok());
    dir = root + "/ckpt";
    ASSERT_TRUE(Save(src->state, dir, *world).ok());
    Result<std::string> top = DefaultStorage()->ReadFileToString(dir + "/manifest");
    ASSERT_TRUE(top.ok());
    Result<internal_format::ManifestIndex> decoded = internal_format::DecodeIndex(*top, "manifest");
    ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
    index = std::move(*decoded);
  }
  void TearDown() override {
    internal_checkpoint::SetManifestSharding({});
    ASSERT_TRUE(world->Barrier().ok());
    if (rank == 0) {
      EXPECT_TRUE(DefaultStorage()->RemoveAll(root).ok());
    }
  }

  std::unique_ptr<Comm> world;
  int n = 0, rank = 0;
  std::string root, dir;
  const testing::ModelConfig model{2, 64, 256, 1000};
  const testing::RefModel ref = testing::MakeReference(model, 7);
  testing::ParallelConfig p;
  internal_format::ManifestIndex index;
};

TEST_F(ShardedManifest, LoadsBackAndReadsEachShardOnceInTheJob) {
  ASSERT_GT(index.shards.size(), 2u);
  size_t in_parts = 0;
  for (const auto& t : index.tensors) in_parts += t.parts.size() > 1 ? 1 : 0;
  ASSERT_GT(in_parts, 0u);

  for (bool cooperative : {false, true}) {
    auto dst = testing::BuildRankState(model, p, rank);
    ASSERT_TRUE(dst.ok());
    ShardReads counter(DefaultStorage());
    LoadOptions o;
    o.storage = &counter;
    o.cooperative = cooperative;
    Status s = Load(dst->state, dir, *world, o).status();
    ASSERT_TRUE(s.ok()) << s.ToString();
    Status c = testing::CheckAgainstReference(ref, dst->state.tensors);
    EXPECT_TRUE(c.ok()) << c.ToString();
    std::vector<std::string> all;
    ASSERT_TRUE(world->AllGather(std::to_string(counter.reads.load()), &all).ok());
    int total = 0;
    for (const std::string& x : all) total += std::stoi(x);
    EXPECT_GE(total, 1);
    EXPECT_LE(total, static_cast<int>(index.shards.size())) << "cooperative " << cooperative;
  }

  // A corrupt shard: every process fails with the same DataLoss naming it.
  ASSERT_TRUE(world->Barrier().ok());
  if (rank == 0) {
    std::fstream f(dir + "/data/manifest.shards", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(index.shards[0].nbytes / 2));
    f.put('\x55');
  }
  ASSERT_TRUE(world->Barrier().ok());
  auto dst = testing::BuildRankState(model, p, rank);
  ASSERT_TRUE(dst.ok());
  Status s = Load(dst->state, dir, *world).status();
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.ToString();
  EXPECT_NE(s.message().find("data/manifest.shards shard 0 (bytes [0, "), std::string::npos)
      << s.ToString();
  std::vector<std::string> messages;
  ASSERT_TRUE(world->AllGather(s.message(), &messages).ok());
  for (const std::string& m : messages) EXPECT_EQ(m, messages[0]);
}

// The request check across processes: each process builds only its own
// keys' index entries and names the keys it owns (number mod processes); the
// keys no process requested come back, exactly, on every process.
TEST_F(ShardedManifest, EveryProcessNamesExactlyTheKeysNoProcessRequested) {
  // No process requests every third stored key; the last one also drops
  // the second key, which the others request.
  std::vector<std::string> dropped;
  for (size_t i = 0; i < index.tensors.size(); i += 3) dropped.push_back(index.tensors[i].key);
  std::vector<std::string> unexpected = dropped;
  unexpected.push_back("rng_state");
  std::sort(unexpected.begin(), unexpected.end());
  auto dst = testing::BuildRankState(model, p, rank);
  ASSERT_TRUE(dst.ok());
  dst->state.objects.clear();
  auto& ts = dst->state.tensors;
  ts.erase(std::remove_if(ts.begin(), ts.end(),
                          [&](const LocalTensor& lt) {
                            const std::string& k = lt.segments.at(0).key;
                            return std::binary_search(dropped.begin(), dropped.end(), k) ||
                                   (n > 1 && rank == n - 1 && k == index.tensors[1].key);
                          }),
           ts.end());
  LoadOptions o;
  o.cooperative = false;
  o.allow_unexpected_keys = true;
  Result<LoadResult> r = Load(dst->state, dir, *world, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->unexpected_keys, unexpected);
  Status c = testing::CheckAgainstReference(ref, dst->state.tensors);
  EXPECT_TRUE(c.ok()) << c.ToString();
}

}  // namespace
}  // namespace shardpoint

int main(int argc, char** argv) {
  return shardpoint::testing::RunMpiTests(argc, argv, "sharded_manifest_check");
}
