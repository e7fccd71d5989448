// Checkpoints on a real Ceph radosgw (the ctest fixture s3_server): saved by
// N thread ranks and loaded by M under another layout, bit for bit; data
// files around the multipart part size; an empty tensor; the commit point
// (a conditional create: a second commit is refused); the manager's lease,
// tracker and retention; and s3:// paths through DefaultStorage.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "shardpoint/checkpoint.h"
#include "shardpoint/manager.h"
#include "src/objstore/s3_storage.h"
#include "tests/s3/s3_server.h"
#include "tests/testing/ranks.h"
#include "tests/testing/run_command.h"
#include "tests/testing/transformer.h"

namespace shardpoint {
namespace {

using internal_objstore::S3Client;
using internal_objstore::S3Options;
using internal_objstore::S3Storage;
using testing::ParallelConfig;

constexpr char kBucket[] = "checkpoint-check";

std::unique_ptr<S3Storage> NewStorage(uint64_t part_size = uint64_t{5} << 20,
                                      uint64_t read_bytes = uint64_t{16} << 20) {
  S3Options o;
  o.part_size = part_size;
  o.read_request_bytes = read_bytes;
  Result<S3Options> r = internal_objstore::ResolveS3Options(o);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  Result<std::unique_ptr<S3Client>> c = S3Client::Make(*r);
  EXPECT_TRUE(c.ok());
  return std::make_unique<S3Storage>(std::move(*c));
}

std::string Unique(const std::string& name) {
  return "s3://" + std::string(kBucket) + "/" + name + "-" +
         std::to_string(std::chrono::steady_clock::now().time_since_epoch().count());
}

class S3CheckpointCheck : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { ASSERT_TRUE(NewStorage()->client()->CreateBucket(kBucket).ok()); }
};

// 4 ranks (TP 2 x DP 2, distributed optimizer) save; 3 ranks (TP 3) load.
// Hidden 256 / FFN 1024 make each rank's data file about one 5 MiB part, so
// files fall on both sides of the part boundary.
TEST_F(S3CheckpointCheck, SaveFourRanksLoadThreeReshardedBitForBit) {
  auto storage = NewStorage();
  const std::string dir = Unique("reshard");
  testing::ModelConfig model{2, 256, 1024, 1000};
  const testing::RefModel ref = testing::MakeReference(model, 5);
  const ParallelConfig from{2, 1, 2, true}, to{3, 1, 1, false};
  std::vector<testing::RankState> src(from.world());
  for (int r = 0; r < from.world(); ++r) {
    auto rs = testing::BuildRankState(model, from, r);
    ASSERT_TRUE(rs.ok()) << rs.status().ToString();
    src[r] = std::move(*rs);
    ASSERT_TRUE(testing::FillFromReference(ref, src[r].state.tensors).ok());
  }
  SaveOptions so;
  so.storage = storage.get();
  Status saved = testing::FirstError(RunThreadRanks(from.world(), [&](Comm& comm) {
    return Save(src[comm.rank()].state, dir, comm, so).status();
  }));
  ASSERT_TRUE(saved.ok()) << saved.ToString();
  // The data files straddle the part size: some multipart, maybe some not.
  Result<std::vector<std::string>> files = storage->ListDir(dir + "/data");
  ASSERT_TRUE(files.ok()) << files.status().ToString();
  EXPECT_EQ(files->size(), 4u);

  // Loaded twice: with GETs of 1 MiB (read_slice_bytes, the old way) and of
  // the storage's read size (16 MiB): bit for bit both times, fewer GETs.
  uint64_t requests[2] = {0, 0};
  for (int big = 0; big < 2; ++big) {
    std::vector<testing::RankState> dst(to.world());
    for (int r = 0; r < to.world(); ++r) {
      auto rs = testing::BuildRankState(model, to, r);
      ASSERT_TRUE(rs.ok());
      dst[r] = std::move(*rs);
      dst[r].state.objects.clear();
      dst[r].state.common = "";
    }
    auto reader = NewStorage(uint64_t{5} << 20, big ? uint64_t{16} << 20 : uint64_t{1} << 20);
    LoadOptions lo;
    lo.storage = reader.get();
    lo.allow_unexpected_keys = true;
    lo.io_threads = 1;  // a GET up to this rank's whole share (src/io/read_size.h)
    std::atomic<uint64_t> gets{0};
    Status loaded = testing::FirstError(RunThreadRanks(to.world(), [&](Comm& comm) {
      Result<LoadResult> r = Load(dst[comm.rank()].state, dir, comm, lo);
      if (r.ok()) gets += r->requests;
      return r.status();
    }));
    ASSERT_TRUE(loaded.ok()) << loaded.ToString();
    requests[big] = gets.load();
    for (int r = 0; r < to.world(); ++r) {
      Status c = testing::CheckAgainstReference(ref, dst[r].state.tensors);
      EXPECT_TRUE(c.ok()) << "rank " << r << ": " << c.ToString();
      EXPECT_EQ(*dst[r].state.common, "{\"iteration\": 1000}");
    }
  }
  EXPECT_LT(requests[1] * 4, requests[0] * 3) << requests[0] << " -> " << requests[1] << " GETs";
  // The CLI takes the s3:// path as it is (its DefaultStorage dispatches).
  testing::CommandResult verify =
      testing::RunCommand(std::string(SP_CLI_PATH) + " verify " + dir + " 2>&1");
  EXPECT_EQ(verify.exit_code, 0) << verify.out;
  testing::CommandResult inspect =
      testing::RunCommand(std::string(SP_CLI_PATH) + " inspect " + dir + " 2>&1");
  EXPECT_EQ(inspect.exit_code, 0) << inspect.out;
  EXPECT_NE(inspect.out.find(" F32 "), std::string::npos) << inspect.out;
  EXPECT_TRUE(storage->RemoveAll(dir).ok());
  EXPECT_FALSE(*storage->Exists(dir + "/manifest"));
  testing::CommandResult gone =
      testing::RunCommand(std::string(SP_CLI_PATH) + " verify " + dir + " 2>&1");
  EXPECT_NE(gone.exit_code, 0) << gone.out;
}

State OneTensor(std::vector<float>* data, Shape shape) {
  State s;
  LocalTensor t;
  t.dtype = DType::kF32;
  t.shape = shape;
  t.data = data->data();
  t.segments = {Segment{"w", shape, Box::Whole(shape), Shape(shape.size(), 0)}};
  s.tensors.push_back(t);
  return s;
}

TEST_F(S3CheckpointCheck, SecondCommitIsRefusedAndOverwriteExplained) {
  auto storage = NewStorage();
  const std::string dir = Unique("commit");
  std::vector<float> a(1000, 1.5f);
  SaveOptions so;
  so.storage = storage.get();
  State s = OneTensor(&a, {1000});
  auto comm = MakeSingleComm();
  ASSERT_TRUE(Save(s, dir, *comm, so).ok());
  Result<SaveStats> again = Save(s, dir, *comm, so);
  EXPECT_EQ(again.status().code(), StatusCode::kFailedPrecondition) << again.status().ToString();
  so.overwrite = true;
  Result<SaveStats> over = Save(s, dir, *comm, so);
  EXPECT_EQ(over.status().code(), StatusCode::kFailedPrecondition) << over.status().ToString();
  EXPECT_NE(over.status().message().find("no rename"), std::string::npos)
      << over.status().ToString();
  // The commit primitive itself: of two creates of one manifest, one wins.
  EXPECT_TRUE(storage->CommitFile(dir + "/other", "1", true).ok());
  Status second = storage->CommitFile(dir + "/other", "2", true);
  EXPECT_EQ(second.code(), StatusCode::kFailedPrecondition) << second.ToString();
  EXPECT_EQ(*storage->ReadFileToString(dir + "/other"), "1");
}

TEST_F(S3CheckpointCheck, EmptyTensorAndDefaultStorageDispatch) {
  // Through DefaultStorage: the s3:// path alone selects the object store.
  const std::string dir = Unique("empty");
  std::vector<float> none(1, 0.f);
  State s = OneTensor(&none, {0, 4});
  auto comm = MakeSingleComm();
  // An upload a crashed save left open under it: aborted at the commit,
  // through the dispatch too.
  std::string bucket, key;
  ASSERT_TRUE(internal_objstore::ParseS3Path(dir, &bucket, &key).ok());
  auto client = NewStorage();
  Result<std::string> stale = client->client()->CreateMultipartUpload(bucket, key + "/data/3");
  ASSERT_TRUE(stale.ok()) << stale.status().ToString();
  ASSERT_TRUE(Save(s, dir, *comm).ok());
  Result<std::vector<internal_objstore::S3OpenUpload>> open =
      client->client()->ListMultipartUploads(bucket, key + "/");
  ASSERT_TRUE(open.ok()) << open.status().ToString();
  EXPECT_TRUE(open->empty()) << (*open)[0].key;
  std::vector<float> back(1, 9.f);
  State d = OneTensor(&back, {0, 4});
  Result<LoadResult> r = Load(d, dir, *comm);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(*DefaultStorage()->Exists(dir + "/manifest"));
  EXPECT_EQ(Load(d, dir + "-missing", *comm).status().code(), StatusCode::kNotFound);
}

// What a small load costs in requests: the manifest in one GET (no HEAD for
// kind detection, existence or size) and one GET for the one data file. A
// missing checkpoint is still NotFound naming its manifest.
TEST_F(S3CheckpointCheck, SmallLoadIsOneGetForTheManifestAndOnePerDataFile) {
  auto storage = NewStorage();
  const std::string dir = Unique("requests");
  std::vector<float> a(1000);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i) * 0.25f - 7.f;
  SaveOptions so;
  so.storage = storage.get();
  auto comm = MakeSingleComm();
  ASSERT_TRUE(Save(OneTensor(&a, {1000}), dir, *comm, so).ok());
  auto reader = NewStorage();
  LoadOptions lo;
  lo.storage = reader.get();
  std::vector<float> back(1000, 0.f);
  State d = OneTensor(&back, {1000});
  const uint64_t before = reader->client()->stats().requests;
  Result<LoadResult> r = Load(d, dir, *comm, lo);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(back, a);
  EXPECT_EQ(r->requests, 1u);                                  // the data file's one GET
  EXPECT_EQ(reader->client()->stats().requests - before, 2u);  // + the manifest's one GET
  Result<LoadResult> missing = Load(d, dir + "-missing", *comm, lo);
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound) << missing.status().ToString();
  EXPECT_NE(missing.status().message().find(dir + "-missing/manifest"), std::string::npos)
      << missing.status().ToString();
  EXPECT_TRUE(storage->RemoveAll(dir).ok());
}

// A save's requests besides its data: one LIST of the directory (a
// manifest there? data a crashed save left?), the manifest's conditional
// PUT and, beside it, one listing of the uploads a crashed save left open.
// Before: 11 (HEAD + LIST for each of dir, dir.old, dir.partial and the
// manifest, a LIST and a DELETE of data/, a DELETE of manifest.tmp).
TEST_F(S3CheckpointCheck, SmallSaveIsOneListingOnePutPerFileAndTheManifest) {
  auto storage = NewStorage();
  const std::string dir = Unique("save-requests");
  std::vector<float> a(1000);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i) * 0.5f - 3.f;
  SaveOptions so;
  so.storage = storage.get();
  auto comm = MakeSingleComm();
  uint64_t before = storage->client()->stats().requests;
  ASSERT_TRUE(Save(OneTensor(&a, {1000}), dir, *comm, so).ok());
  // LIST, data PUT, manifest PUT, ListMultipartUploads.
  EXPECT_EQ(storage->client()->stats().requests - before, 4u);
  // A crashed save's leftover (a data file and no manifest): removed by the
  // next save to that directory, at the cost of its listing and deletes.
  const std::string crashed = Unique("save-crashed");
  ASSERT_TRUE(storage->WriteStringToFile(crashed + "/data/7.safetensors", "stale").ok());
  before = storage->client()->stats().requests;
  ASSERT_TRUE(Save(OneTensor(&a, {1000}), crashed, *comm, so).ok());
  // LIST dir; LIST data/ + DELETE 7 + DELETE data; data PUT; manifest PUT;
  // ListMultipartUploads.
  EXPECT_EQ(storage->client()->stats().requests - before, 7u);
  EXPECT_FALSE(*storage->Exists(crashed + "/data/7.safetensors"));
  std::vector<float> back(1000, 0.f);
  LoadOptions lo;
  lo.storage = storage.get();
  State d = OneTensor(&back, {1000});
  ASSERT_TRUE(Load(d, crashed, *comm, lo).ok());
  EXPECT_EQ(back, a);
  // A committed directory is refused after the one listing, nothing written.
  before = storage->client()->stats().requests;
  Result<SaveStats> again = Save(OneTensor(&a, {1000}), dir, *comm, so);
  EXPECT_EQ(again.status().code(), StatusCode::kFailedPrecondition) << again.status().ToString();
  EXPECT_NE(again.status().message().find(dir), std::string::npos) << again.status().ToString();
  EXPECT_EQ(storage->client()->stats().requests - before, 1u);
  EXPECT_TRUE(storage->RemoveAll(dir).ok());
  EXPECT_TRUE(storage->RemoveAll(crashed).ok());
}

TEST_F(S3CheckpointCheck, ManagerLeaseTrackerAndRetention) {
  auto storage = NewStorage();
  const std::string root = Unique("manager");
  std::vector<float> a(256, 2.f);
  State s = OneTensor(&a, {256});
  ManagerOptions mo;
  mo.storage = storage.get();
  mo.keep_last = 2;
  auto single = MakeSingleComm();
  Comm& comm = *single;
  auto m = CheckpointManager::Open(root, comm, mo);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  // The lease is held: a second job is refused, naming the holder.
  auto other = CheckpointManager::Open(root, comm, mo);
  EXPECT_EQ(other.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(other.status().message().find("pid"), std::string::npos) << other.status().ToString();
  for (int64_t it : {10, 20, 30}) {
    Result<SaveStats> saved = (*m)->Save(s, it, comm);
    ASSERT_TRUE(saved.ok()) << saved.status().ToString();
  }
  EXPECT_EQ(*(*m)->CompleteIterations(), (std::vector<int64_t>{20, 30}));
  EXPECT_EQ(**(*m)->Tracker(), 30);
  ASSERT_TRUE((*m)->Close().ok());
  auto reopened = CheckpointManager::Open(root, comm, mo);  // released by Close
  ASSERT_TRUE(reopened.ok()) << reopened.status().ToString();
  std::vector<float> back(256, 0.f);
  State d = OneTensor(&back, {256});
  EXPECT_EQ(*(*reopened)->Resume(d, comm), 30);
  EXPECT_EQ(back, a);
}

// A job killed mid-save left uploads open under an iteration of the root:
// the next job's manager aborts them when it takes the lock, before any
// save. An upload of the user's under the root but outside every iteration
// (logs/) is not the manager's and stays.
TEST_F(S3CheckpointCheck, ManagerAbortsTheUploadsACrashedJobLeftOpen) {
  auto storage = NewStorage();
  const std::string root = Unique("abandoned");
  std::string bucket, prefix;
  ASSERT_TRUE(internal_objstore::ParseS3Path(root, &bucket, &prefix).ok());
  S3Client* c = storage->client();
  std::vector<std::pair<std::string, std::string>> uploads;
  for (const char* rel : {"/iter_0000040/data/0.safetensors", "/iter_0000040/data/1.safetensors",
                          "/logs/events.bin"}) {
    Result<std::string> id = c->CreateMultipartUpload(bucket, prefix + rel);
    ASSERT_TRUE(id.ok()) << id.status().ToString();
    uploads.emplace_back(prefix + rel, *id);
  }
  ManagerOptions mo;
  mo.storage = storage.get();
  auto single = MakeSingleComm();
  auto m = CheckpointManager::Open(root, *single, mo);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  Result<std::vector<internal_objstore::S3OpenUpload>> open =
      c->ListMultipartUploads(bucket, prefix + "/");
  ASSERT_TRUE(open.ok()) << open.status().ToString();
  ASSERT_EQ(open->size(), 1u);
  EXPECT_EQ((*open)[0].key, uploads[2].first);
  EXPECT_EQ((*open)[0].upload_id, uploads[2].second);
  EXPECT_TRUE(c->AbortMultipartUpload(bucket, uploads[2].first, uploads[2].second).ok());
  EXPECT_TRUE((*m)->Close().ok());
}

TEST_F(S3CheckpointCheck, ExpiredLeaseIsTakenOver) {
  auto storage = NewStorage();
  storage->set_lease_ms(600);
  const std::string path = Unique("lease") + "/lock";
  Result<std::unique_ptr<FileLock>> first = storage->LockFile(path);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(storage->LockFile(path).status().code(), StatusCode::kFailedPrecondition);
  first->reset();  // the holder "dies": no more renewals
  std::this_thread::sleep_for(std::chrono::milliseconds(900));
  Result<std::unique_ptr<FileLock>> second = storage->LockFile(path);
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_TRUE(storage->UnlockFile(std::move(*second)).ok());
  EXPECT_FALSE(*storage->Exists(path));
}

}  // namespace
}  // namespace shardpoint

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (argc < 2) return 2;
  if (!shardpoint::testing::LoadS3ServerEnv(argv[1])) return 77;
  return RUN_ALL_TESTS();
}
