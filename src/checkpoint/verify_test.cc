// VerifyCheckpoint (`shardpoint verify`): every checksum and the tiling of
// every tensor; faults name the key, chunk, file and byte range; chunks are
// read in bounded slices with progress.
#include "src/checkpoint/verify.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>

#include "shardpoint/checkpoint.h"
#include "src/source/manifest_read.h"

using shardpoint::internal_format::ChunkRecord;
using shardpoint::internal_format::EncodeManifest;
using shardpoint::internal_format::kFormatVersion;
using shardpoint::internal_format::kManifestName;
using shardpoint::internal_format::Manifest;
using shardpoint::internal_format::ManifestToJson;
using shardpoint::internal_format::ObjectRecord;
using shardpoint::internal_format::TensorRecord;
using shardpoint::internal_source::ReadManifest;

namespace shardpoint::internal_checkpoint {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

std::vector<std::string> Messages(const std::vector<VerifyFault>& faults) {
  std::vector<std::string> out;
  for (const VerifyFault& f : faults) out.push_back(f.message);
  return out;
}

// 8 + N: where a data file's data region starts.
size_t ChunkDataStart(const std::string& file) {
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(file[i]);
  return static_cast<size_t>(8 + n);
}

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
    o.io_threads = 3;
    o.read_slice_bytes = slice_bytes;
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
  o.io_threads = 2;
  o.read_slice_bytes = 64;  // many slices per chunk: the streamed checksum must match
  o.progress = [&](uint64_t done, uint64_t total) { calls.emplace_back(done, total); };
  Result<VerifyReport> r = VerifyCheckpoint(storage_.get(), "ckpt", o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->ok()) << ::testing::PrintToString(Messages(r->faults));
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
    ASSERT_EQ(r->faults.size(), 1u) << ::testing::PrintToString(Messages(r->faults));
    EXPECT_THAT(r->faults[0].message,
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
  EXPECT_THAT(::testing::PrintToString(Messages(r->faults)), HasSubstr(file));
  EXPECT_THAT(::testing::PrintToString(Messages(r->faults)), HasSubstr("tensor 'a' chunk 0"));
}

// The header's entries can be intact while its other bytes are not: the
// file would still load, but it is no longer the file the writer wrote.
TEST_F(VerifyTest, AlteredHeaderMetadataOrPaddingIsAFault) {
  const std::string file = manifest_.files[0];
  const std::string original = *storage_->ReadFileToString("ckpt/" + file);
  auto expect_fault = [&](const std::string& what) {
    Result<VerifyReport> r = Verify();
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_EQ(r->faults.size(), 1u)
        << what << ": " << ::testing::PrintToString(Messages(r->faults));
    EXPECT_EQ(r->faults[0].kind, VerifyFault::Kind::kFileHeader);
    EXPECT_EQ(r->faults[0].file, file);
    EXPECT_THAT(r->faults[0].message, HasSubstr("'" + file + "': header bytes [0, "));
    EXPECT_THAT(r->faults[0].message, HasSubstr("differ from the header the manifest implies"));
    ASSERT_TRUE(storage_->WriteStringToFile("ckpt/" + file, original).ok());
  };
  Rewrite(file, [](std::string* b) {
    size_t at = b->find(R"("version":"1")");
    ASSERT_NE(at, std::string::npos);
    (*b)[at + 11] = '2';
  });
  expect_fault("__metadata__ version changed");
  Rewrite(file, [](std::string* b) {
    // The same JSON with one more space inside and one less in the padding.
    size_t at = b->find(R"({"__metadata__")");
    ASSERT_NE(at, std::string::npos);
    b->insert(at + 1, " ");
    const size_t last_pad = ChunkDataStart(*b);  // shifted by the insertion
    ASSERT_EQ((*b)[last_pad], ' ');
    b->erase(last_pad, 1);
  });
  expect_fault("spacing moved");
  // Every byte of the header, one bit each (seeded).
  std::mt19937 rng(7);
  const size_t header = ChunkDataStart(original);
  for (size_t at = 0; at < header; at += 1) {
    Rewrite(file, [&](std::string* b) { (*b)[at] ^= static_cast<char>(1 << (rng() % 8)); });
    Result<VerifyReport> r = Verify();
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_FALSE(r->ok()) << "a flip in header byte " << at << " passes verify";
    ASSERT_TRUE(storage_->WriteStringToFile("ckpt/" + file, original).ok());
    if (HasFailure()) break;
  }
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
  ASSERT_EQ(r->faults.size(), 1u) << ::testing::PrintToString(Messages(r->faults));
  EXPECT_THAT(r->faults[0].message, HasSubstr("'a'"));
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

// The public API (shardpoint/verify.h): the same checks, faults as records.
TEST_F(VerifyTest, PublicVerifyGivesStructuredFaults) {
  const ChunkRecord& c = ChunkOfA(1);
  const std::string file = manifest_.files[c.file];
  shardpoint::VerifyOptions o;
  o.storage = storage_.get();
  o.io_threads = 2;
  o.read_slice_bytes = 100;
  Result<shardpoint::VerifyReport> clean = shardpoint::VerifyCheckpoint("ckpt", o);
  ASSERT_TRUE(clean.ok()) << clean.status().ToString();
  EXPECT_TRUE(clean->ok()) << ::testing::PrintToString(Messages(clean->faults));
  EXPECT_EQ(clean->tensors, 2);
  EXPECT_EQ(clean->chunks_checked, 3);
  EXPECT_EQ(clean->objects_checked, 2);
  EXPECT_EQ(clean->files, static_cast<int64_t>(manifest_.files.size()));
  EXPECT_EQ(clean->bytes_checked, 700u * 4 + 5 * 2 + 2 * 15);

  Rewrite(file, [&](std::string* b) { (*b)[c.offset + 5] ^= 0x01; });
  Result<shardpoint::VerifyReport> r = shardpoint::VerifyCheckpoint("ckpt", o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->faults.size(), 1u) << ::testing::PrintToString(Messages(r->faults));
  const VerifyFault& f = r->faults[0];
  EXPECT_EQ(f.kind, VerifyFault::Kind::kChunk);
  EXPECT_EQ(f.key, "a");
  EXPECT_EQ(f.chunk, 1);
  EXPECT_EQ(f.file, file);
  EXPECT_EQ(f.begin, c.offset);
  EXPECT_EQ(f.end, c.offset + c.nbytes);
  EXPECT_THAT(f.message, HasSubstr("checksum mismatch"));
}

TEST_F(VerifyTest, PublicVerifyNamesTheObjectAndTheTilingFault) {
  const ObjectRecord& obj = manifest_.objects.at(1);
  Rewrite(manifest_.files[obj.file], [&](std::string* b) { (*b)[obj.offset] ^= 0x01; });
  Manifest m = manifest_;
  for (TensorRecord& t : m.tensors) {
    if (t.key == "a") t.shape = {101, 7};
  }
  ASSERT_TRUE(
      storage_->WriteStringToFile("ckpt/" + std::string(kManifestName), EncodeManifest(m)).ok());
  shardpoint::VerifyOptions o;
  o.storage = storage_.get();
  Result<shardpoint::VerifyReport> r = shardpoint::VerifyCheckpoint("ckpt", o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->faults.size(), 2u) << ::testing::PrintToString(Messages(r->faults));
  bool object = false, tiling = false;
  for (const VerifyFault& f : r->faults) {
    if (f.kind == VerifyFault::Kind::kObject) {
      object = true;
      EXPECT_EQ(f.key, "rng");
      EXPECT_EQ(f.object_index, obj.index);
      EXPECT_EQ(f.file, manifest_.files[obj.file]);
      EXPECT_EQ(f.begin, obj.offset);
      EXPECT_EQ(f.end, obj.offset + obj.nbytes);
    } else {
      EXPECT_EQ(f.kind, VerifyFault::Kind::kTiling);
      tiling = true;
      EXPECT_EQ(f.key, "a");
      EXPECT_EQ(f.chunk, -1);
    }
  }
  EXPECT_TRUE(object && tiling);
}

TEST_F(VerifyTest, PublicVerifyHeaderFaultNamesTheFile) {
  const std::string file = manifest_.files.at(0);
  Rewrite(file, [&](std::string* b) { (*b)[0] = '\xff'; });  // header length now absurd
  shardpoint::VerifyOptions o;
  o.storage = storage_.get();
  Result<shardpoint::VerifyReport> r = shardpoint::VerifyCheckpoint("ckpt", o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_FALSE(r->ok());
  bool header = false;
  for (const VerifyFault& f : r->faults) {
    if (f.kind != VerifyFault::Kind::kFileHeader) continue;
    header = true;
    EXPECT_EQ(f.file, file);
    EXPECT_EQ(f.key, "");
  }
  EXPECT_TRUE(header) << ::testing::PrintToString(Messages(r->faults));
}

TEST_F(VerifyTest, DescribeMatchesTheManifest) {
  shardpoint::DescribeOptions o;
  o.storage = storage_.get();
  Result<CheckpointDescription> d = DescribeCheckpoint("ckpt", o);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->format_version, kFormatVersion);
  EXPECT_EQ(d->files, manifest_.files);
  ASSERT_EQ(d->tensors.size(), 2u);
  EXPECT_EQ(d->tensors[0].key, "a");
  EXPECT_EQ(d->tensors[0].dtype, DType::kF32);
  EXPECT_EQ(d->tensors[0].shape, (Shape{100, 7}));
  EXPECT_EQ(d->tensors[0].nbytes(), 700u * 4);
  EXPECT_EQ(d->tensors[1].key, "b");
  EXPECT_EQ(d->tensors[1].dtype, DType::kBF16);
  ASSERT_EQ(d->tensors[0].chunks.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const ChunkRecord& c = ChunkOfA(i);
    const ChunkDescription& dc = d->tensors[0].chunks[i];
    EXPECT_EQ(dc.box, c.box);
    EXPECT_EQ(dc.file, c.file);
    EXPECT_EQ(dc.offset, c.offset);
    EXPECT_EQ(dc.nbytes, c.nbytes);
    EXPECT_EQ(dc.checksum, c.checksum);
  }
  ASSERT_EQ(d->objects.size(), 2u);
  EXPECT_EQ(d->objects[1].key, "rng");
  EXPECT_EQ(d->objects[1].index, (Shape{1}));
  EXPECT_EQ(d->objects[1].grid, (Shape{2}));
  EXPECT_EQ(d->objects[1].nbytes, 15u);
  EXPECT_FALSE(d->has_common);
  EXPECT_EQ(d->json, ManifestToJson(manifest_));

  Result<CheckpointDescription> missing = DescribeCheckpoint("other", o);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound) << missing.status().ToString();
}

}  // namespace
}  // namespace shardpoint::internal_checkpoint
