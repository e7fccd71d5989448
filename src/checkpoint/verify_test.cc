// VerifyCheckpoint (`shardpoint verify`): every checksum and the tiling of
// every tensor; faults name the key, chunk, file and byte range; chunks are
// read in bounded slices with progress.
#include "src/checkpoint/verify.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>

#include "shardpoint/checkpoint.h"
#include "src/checkpoint/commit.h"

namespace shardpoint::internal {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// Two ranks, each holding rows [50r, 50r+50) of "a" [100, 7] F32 and a whole
// replica of "b" [5] BF16, plus one object per rank.
class VerifyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::mt19937 rng(20261123);
    for (auto& v : a_) v = static_cast<float>(rng() % 1000) / 7.0f;
    for (auto& v : b_) v = static_cast<uint16_t>(rng());
    std::vector<Status> st = RunThreadRanks(2, [&](Comm& comm) -> Status {
      const int r = comm.rank();
      State s;
      LocalTensor a;
      a.data = a_.data() + r * 50 * 7;
      a.dtype = DType::kF32;
      a.shape = {50, 7};
      a.segments = {Segment{"a", {100, 7}, Box{{50 * r, 0}, {50, 7}}, {0, 0}}};
      LocalTensor b;
      b.data = b_.data();
      b.dtype = DType::kBF16;
      b.shape = {5};
      b.segments = {Segment{"b", {5}, Box::Whole({5}), {0}}};
      s.tensors = {a, b};
      s.objects = {Object{"rng", "state of rank " + std::to_string(r), {r}, {2}}};
      SaveOptions o;
      o.storage = storage_.get();
      return Save(s, "ckpt", comm, o).status();
    });
    for (const Status& s : st) ASSERT_TRUE(s.ok()) << s.ToString();
    Result<Manifest> m = ReadManifest(storage_.get(), "ckpt");
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    manifest_ = *m;
  }

  Result<VerifyReport> Verify(size_t slice_bytes = size_t{16} << 20) {
    VerifyOptions o;
    o.threads = 3;
    o.slice_bytes = slice_bytes;
    return VerifyCheckpoint(storage_.get(), "ckpt", o);
  }

  const ChunkRecord& ChunkOfA(size_t i) const {
    for (const TensorRecord& t : manifest_.tensors) {
      if (t.key == "a") return t.chunks.at(i);
    }
    ADD_FAILURE() << "no tensor a";
    return manifest_.tensors.at(0).chunks.at(0);
  }

  void Rewrite(const std::string& file, const std::function<void(std::string*)>& edit) {
    Result<std::string> bytes = storage_->ReadFileToString("ckpt/" + file);
    ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
    edit(&*bytes);
    ASSERT_TRUE(storage_->WriteStringToFile("ckpt/" + file, *bytes).ok());
  }

  std::vector<float> a_ = std::vector<float>(700);
  std::vector<uint16_t> b_ = std::vector<uint16_t>(5);
  std::unique_ptr<Storage> storage_ = NewMemStorage();
  Manifest manifest_;
};

TEST_F(VerifyTest, CleanCheckpointPassesWithProgress) {
  std::vector<std::pair<uint64_t, uint64_t>> calls;
  VerifyOptions o;
  o.threads = 2;
  o.slice_bytes = 64;  // many slices per chunk: the streamed checksum must match
  o.progress = [&](uint64_t done, uint64_t total) { calls.emplace_back(done, total); };
  Result<VerifyReport> r = VerifyCheckpoint(storage_.get(), "ckpt", o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->ok()) << ::testing::PrintToString(r->faults);
  EXPECT_EQ(r->chunks_checked, 3);  // a: 2 chunks, b: 1 (replicas deduplicated)
  EXPECT_EQ(r->objects_checked, 2);
  const uint64_t total = 700 * 4 + 5 * 2 + std::string("state of rank 0").size() * 2;
  EXPECT_EQ(r->bytes_checked, total);
  ASSERT_GE(calls.size(), 2 * (50 * 7 * 4 / 64));
  for (size_t i = 0; i < calls.size(); ++i) {
    EXPECT_EQ(calls[i].second, total);
    if (i > 0) {
      EXPECT_GT(calls[i].first, calls[i - 1].first);
    }
  }
  EXPECT_EQ(calls.back().first, total);
}

TEST_F(VerifyTest, FlippedByteNamesKeyChunkFileAndRange) {
  const ChunkRecord& c = ChunkOfA(1);
  const std::string file = manifest_.files[c.file];
  Rewrite(file, [&](std::string* b) { (*b)[c.offset + 123] ^= 0x10; });
  for (size_t slice : {size_t{16} << 20, size_t{100}}) {
    Result<VerifyReport> r = Verify(slice);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_EQ(r->faults.size(), 1u) << ::testing::PrintToString(r->faults);
    EXPECT_THAT(r->faults[0],
                StartsWith("tensor 'a' chunk 1 [50:100, 0:7] in '" + file +
                           "': checksum mismatch at bytes [" + std::to_string(c.offset) + ", " +
                           std::to_string(c.offset + c.nbytes) + ") (stored "));
    EXPECT_EQ(r->bytes_checked, 700u * 4 + 5 * 2 + 2 * 15);  // a fault still counts its bytes
  }
}

TEST_F(VerifyTest, TruncatedDataFileIsAFault) {
  const ChunkRecord& c = ChunkOfA(0);
  const std::string file = manifest_.files[c.file];
  Rewrite(file, [&](std::string* b) { b->resize(c.offset + 10); });
  Result<VerifyReport> r = Verify();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_FALSE(r->ok());
  EXPECT_THAT(::testing::PrintToString(r->faults), HasSubstr(file));
  EXPECT_THAT(::testing::PrintToString(r->faults), HasSubstr("tensor 'a' chunk 0"));
}

TEST_F(VerifyTest, TensorNotTiledIsAFault) {
  Manifest m = manifest_;
  for (TensorRecord& t : m.tensors) {
    if (t.key == "a") t.shape = {101, 7};  // row 100 is held by no chunk
  }
  ASSERT_TRUE(
      storage_->WriteStringToFile("ckpt/" + std::string(kManifestName), EncodeManifest(m)).ok());
  Result<VerifyReport> r = Verify();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->faults.size(), 1u) << ::testing::PrintToString(r->faults);
  EXPECT_THAT(r->faults[0], HasSubstr("'a'"));
}

TEST_F(VerifyTest, MissingOrGarbageManifestIsAnError) {
  ASSERT_TRUE(storage_->WriteStringToFile("ckpt/" + std::string(kManifestName), "garbage").ok());
  Result<VerifyReport> r = Verify();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss) << r.status().ToString();
  ASSERT_TRUE(storage_->RemoveFile("ckpt/" + std::string(kManifestName)).ok());
  r = Verify();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound) << r.status().ToString();
}

}  // namespace
}  // namespace shardpoint::internal
