// The object-store save's directory check overlapped with its uploads
// (src/checkpoint/held_save.h), on the real radosgw: the LIST is answered
// only after the uploads began; a crashed save's data under the same keys is
// replaced bit for bit; a refused save (a checkpoint is there) leaves no
// multipart upload and no object behind and keeps its error text.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <random>
#include <thread>

#include "shardpoint/checkpoint.h"
#include "src/objstore/s3_storage.h"
#include "tests/testing/ranks.h"

namespace shardpoint {
namespace {

using internal_objstore::S3Client;
using internal_objstore::S3Options;
using internal_objstore::S3Storage;

constexpr char kBucket[] = "held-save-check";
constexpr int64_t kFloats = int64_t{6} << 18;  // 6 MiB a rank: two 5 MiB parts

std::unique_ptr<S3Storage> NewStorage() {
  S3Options o;
  o.part_size = uint64_t{5} << 20;
  Result<S3Options> r = internal_objstore::ResolveS3Options(o);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  Result<std::unique_ptr<S3Client>> c = S3Client::Make(*r);
  EXPECT_TRUE(c.ok());
  return std::make_unique<S3Storage>(std::move(*c));
}

std::string Key(const std::string& name) {
  return name + "-" + std::to_string(std::chrono::steady_clock::now().time_since_epoch().count());
}

// Rank `rank`'s row of a [2, kFloats] tensor.
State Row(std::vector<float>* data, int rank) {
  State s;
  LocalTensor t;
  t.dtype = DType::kF32;
  t.shape = {1, kFloats};
  t.data = data->data();
  t.segments = {Segment{"w", {2, kFloats}, Box{{rank, 0}, {1, kFloats}}, {0, 0}}};
  s.tensors.push_back(t);
  return s;
}

std::vector<std::vector<float>> Rows(uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1, 1);
  std::vector<std::vector<float>> rows(2, std::vector<float>(kFloats));
  for (auto& r : rows)
    for (float& x : r) x = dist(rng);
  return rows;
}

Status SaveRows(Storage* storage, std::vector<std::vector<float>>& rows, const std::string& dir) {
  SaveOptions so;
  so.storage = storage;
  return testing::FirstError(RunThreadRanks(2, [&](Comm& comm) {
    return Save(Row(&rows[comm.rank()], comm.rank()), dir, comm, so).status();
  }));
}

std::vector<std::vector<float>> LoadRows(Storage* storage, const std::string& dir) {
  std::vector<std::vector<float>> back(2, std::vector<float>(kFloats, 0.f));
  LoadOptions lo;
  lo.storage = storage;
  Status loaded = testing::FirstError(RunThreadRanks(2, [&](Comm& comm) {
    State into = Row(&back[comm.rank()], comm.rank());
    return Load(into, dir, comm, lo).status();
  }));
  EXPECT_TRUE(loaded.ok()) << loaded.ToString();
  return back;
}

// Answers the save's listing of `dir` only once the ranks' uploads have sent
// requests (or after 10 s): records whether they did before it.
class SlowListing : public StorageWrapper {
 public:
  SlowListing(S3Storage* base, std::string dir) : StorageWrapper(base), s3_(base), dir_(dir) {}
  Result<std::vector<std::string>> ListDir(const std::string& path) override {
    if (path == dir_) {
      const uint64_t start = s3_->client()->stats().requests;
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (s3_->client()->stats().requests < start + 3 &&
             std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      uploads_before_listing = s3_->client()->stats().requests >= start + 3;
    }
    return StorageWrapper::ListDir(path);
  }
  std::atomic<bool> uploads_before_listing{false};

 private:
  S3Storage* const s3_;
  const std::string dir_;
};

class S3HeldSaveCheck : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { ASSERT_TRUE(NewStorage()->client()->CreateBucket(kBucket).ok()); }
};

// A crashed save left data/0 (the key rank 0 writes now) and data/7: the
// listing runs while the uploads go, then data/ is emptied, then the
// completes: the new checkpoint loads bit for bit, data/7 is gone.
TEST_F(S3HeldSaveCheck, ListingOverlapsTheUploadsAndACrashedSaveIsReplaced) {
  auto s3 = NewStorage();
  const std::string key = Key("crashed");
  const std::string dir = "s3://" + std::string(kBucket) + "/" + key;
  ASSERT_TRUE(s3->WriteStringToFile(dir + "/data/0.safetensors", "stale").ok());
  ASSERT_TRUE(s3->WriteStringToFile(dir + "/data/7.safetensors", "stale").ok());
  SlowListing slow(s3.get(), dir);
  auto rows = Rows(1);
  Status saved = SaveRows(&slow, rows, dir);
  ASSERT_TRUE(saved.ok()) << saved.ToString();
  EXPECT_TRUE(slow.uploads_before_listing) << "the LIST came before any upload";
  EXPECT_TRUE(LoadRows(s3.get(), dir) == rows);
  Result<std::vector<std::string>> data = s3->ListDir(dir + "/data");
  ASSERT_TRUE(data.ok()) << data.status().ToString();
  std::sort(data->begin(), data->end());
  EXPECT_EQ(*data, (std::vector<std::string>{"0.safetensors", "1.safetensors"}));
  Result<std::vector<internal_objstore::S3OpenUpload>> open =
      s3->client()->ListMultipartUploads(kBucket, key);
  ASSERT_TRUE(open.ok()) << open.status().ToString();
  EXPECT_TRUE(open->empty()) << (*open)[0].key;
}

// A writer killed mid-save left an upload open under data/ (parts stored,
// no object): the next save to the directory aborts it after its commit. An
// upload under another prefix is not touched.
TEST_F(S3HeldSaveCheck, AnUploadACrashedSaveLeftOpenIsAbortedAfterTheNextCommit) {
  auto s3 = NewStorage();
  const std::string key = Key("abandoned");
  const std::string dir = "s3://" + std::string(kBucket) + "/" + key;
  internal_objstore::S3Client* c = s3->client();
  Result<std::string> stale = c->CreateMultipartUpload(kBucket, key + "/data/5.safetensors");
  ASSERT_TRUE(stale.ok()) << stale.status().ToString();
  ASSERT_TRUE(
      c->UploadPart(kBucket, key + "/data/5.safetensors", *stale, 1, std::string(4096, 'x')).ok());
  const std::string other_key = key + "-other/data/0.safetensors";
  Result<std::string> other = c->CreateMultipartUpload(kBucket, other_key);
  ASSERT_TRUE(other.ok()) << other.status().ToString();
  auto rows = Rows(2);
  Status saved = SaveRows(s3.get(), rows, dir);
  ASSERT_TRUE(saved.ok()) << saved.ToString();
  EXPECT_TRUE(LoadRows(s3.get(), dir) == rows);
  Result<std::vector<internal_objstore::S3OpenUpload>> open =
      c->ListMultipartUploads(kBucket, key + "/");
  ASSERT_TRUE(open.ok()) << open.status().ToString();
  EXPECT_TRUE(open->empty()) << (*open)[0].key;
  Result<std::vector<internal_objstore::S3OpenUpload>> kept =
      c->ListMultipartUploads(kBucket, key + "-other/");
  ASSERT_TRUE(kept.ok()) << kept.status().ToString();
  ASSERT_EQ(kept->size(), 1u);
  EXPECT_EQ((*kept)[0].upload_id, *other);
  EXPECT_TRUE(c->AbortMultipartUpload(kBucket, other_key, *other).ok());
}

// A second save into a committed directory: refused with the error it always
// had; its uploads (begun before the verdict) are aborted, nothing of it is
// visible, and the first checkpoint loads bit for bit.
TEST_F(S3HeldSaveCheck, RefusalLeavesNoUploadBehindAndTheErrorUnchanged) {
  auto s3 = NewStorage();
  const std::string key = Key("refused");
  const std::string dir = "s3://" + std::string(kBucket) + "/" + key;
  auto first = Rows(2);
  ASSERT_TRUE(SaveRows(s3.get(), first, dir).ok());
  Result<internal_objstore::S3Listing> before = s3->client()->List(kBucket, key + "/");
  ASSERT_TRUE(before.ok()) << before.status().ToString();

  auto second = Rows(3);
  Status refused = SaveRows(s3.get(), second, dir);
  EXPECT_EQ(refused.code(), StatusCode::kFailedPrecondition) << refused.ToString();
  EXPECT_EQ(refused.message(), "rank 0: a checkpoint already exists at '" + dir +
                                   "' (it has a manifest); save elsewhere or pass overwrite");
  Result<std::vector<internal_objstore::S3OpenUpload>> open =
      s3->client()->ListMultipartUploads(kBucket, key);
  ASSERT_TRUE(open.ok()) << open.status().ToString();
  EXPECT_TRUE(open->empty()) << (*open)[0].key;
  Result<internal_objstore::S3Listing> after = s3->client()->List(kBucket, key + "/");
  ASSERT_TRUE(after.ok()) << after.status().ToString();
  ASSERT_EQ(after->objects.size(), before->objects.size());
  for (size_t i = 0; i < after->objects.size(); ++i) {
    EXPECT_EQ(after->objects[i].key, before->objects[i].key);
    EXPECT_EQ(after->objects[i].etag, before->objects[i].etag);
  }
  EXPECT_TRUE(LoadRows(s3.get(), dir) == first);
}

}  // namespace
}  // namespace shardpoint
