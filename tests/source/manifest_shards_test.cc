// Reading manifest shards from the shard files a v6 index names (two owners'
// files here): each file opened once, one read per run of shards adjacent in
// a file, the right bytes for each shard; the whole manifest read back.
#include "src/source/manifest_shards.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "src/io/path.h"

namespace shardpoint::internal_source {
namespace {

using internal_format::CombineIndexes;
using internal_format::EncodeIndex;
using internal_format::EncodeManifest;
using internal_format::Manifest;
using internal_format::ManifestIndex;
using internal_format::SplitManifest;
using internal_format::SplitResult;

const std::string kDir = "ck";

// Counts opens by path and reads.
class OpenCounter : public StorageWrapper {
 public:
  using StorageWrapper::StorageWrapper;
  std::map<std::string, int> opens;
  int reads = 0;

  Result<std::unique_ptr<ReadableFile>> NewReadableFile(const std::string& path) override {
    ++opens[path];
    SP_ASSIGN_OR_RETURN(std::unique_ptr<ReadableFile> f, StorageWrapper::NewReadableFile(path));
    return std::unique_ptr<ReadableFile>(new Counting(std::move(f), &reads));
  }

 private:
  class Counting : public ReadableFileWrapper {
   public:
    Counting(std::unique_ptr<ReadableFile> f, int* reads)
        : ReadableFileWrapper(std::move(f)), reads_(reads) {}
    Status ReadAt(uint64_t offset, size_t n, void* dst) const override {
      ++*reads_;
      return ReadableFileWrapper::ReadAt(offset, n, dst);
    }

   private:
    int* reads_;
  };
};

// 24 tensors; even keys owned by rank 0, odd by rank 5.
Manifest Model(std::mt19937_64& rng) {
  Manifest m;
  m.files = {"data/0.safetensors", "data/5.safetensors"};
  for (int k = 0; k < 24; ++k) {
    internal_format::TensorRecord t{"k" + std::to_string(10 + k), DType::kF32, {12, 2}, {}};
    for (int64_t r = 0; r < 12; r += 3) {
      t.chunks.push_back(
          {Box({r, 0}, {3, 2}), static_cast<uint32_t>(k % 2), rng() % 4096, 24, rng(), {rng()}});
    }
    m.tensors.push_back(std::move(t));
  }
  return internal_format::CanonicalFileOrder(m);
}

class ManifestShardsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::mt19937_64 rng(2026);
    m_ = Model(rng);
    ASSERT_TRUE(storage_->CreateDirs(kDir + "/data").ok());
    std::vector<ManifestIndex> parts;
    for (int owner : {0, 5}) {
      Manifest sub;
      sub.files = m_.files;
      for (size_t k = owner == 0 ? 0 : 1; k < m_.tensors.size(); k += 2) {
        sub.tensors.push_back(m_.tensors[k]);
      }
      const std::string file = "data/manifest." + std::to_string(owner) + ".shards";
      SplitResult split = SplitManifest(sub, 200, 200, static_cast<uint32_t>(owner));
      std::string all;
      for (std::string& s : split.shards) {
        all += s;
        shards_.push_back(std::move(s));
      }
      ASSERT_TRUE(storage_->WriteStringToFile(internal_io::JoinPath(kDir, file), all).ok());
      parts.push_back(std::move(split.index));
    }
    Result<ManifestIndex> index = CombineIndexes(std::move(parts));
    ASSERT_TRUE(index.ok()) << index.status().ToString();
    index_ = std::move(*index);
    ASSERT_GT(index_.shards.size(), 8u);
    first_of_5_ = 0;
    while (index_.shards[first_of_5_].file == 0) ++first_of_5_;
  }

  // Reads `which` through a counter: the bytes of each shard, in order.
  void ExpectRead(const std::vector<uint32_t>& which, int reads) {
    OpenCounter counter(storage_.get());
    uint64_t counted = 0;
    auto got = ReadShards(&counter, kDir, index_, which, &counted);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    ASSERT_EQ(got->size(), which.size());
    for (size_t i = 0; i < which.size(); ++i) {
      EXPECT_EQ((*got)[i].first, which[i]);
      EXPECT_EQ((*got)[i].second, shards_[which[i]]) << "shard " << which[i];
    }
    EXPECT_EQ(counter.reads, reads);
    EXPECT_EQ(counted, static_cast<uint64_t>(reads));
    for (const auto& [path, n] : counter.opens) EXPECT_EQ(n, 1) << path;
    std::set<uint32_t> files;
    for (uint32_t s : which) files.insert(index_.shards[s].file);
    EXPECT_EQ(counter.opens.size(), files.size());
  }

  std::unique_ptr<Storage> storage_ = NewMemStorage();
  Manifest m_;
  ManifestIndex index_;
  std::vector<std::string> shards_;  // numbered as in index_
  uint32_t first_of_5_ = 0;          // the first shard of data/manifest.5.shards
};

TEST_F(ManifestShardsTest, EachFileIsOpenedOnceAndEachRunInAFileIsOneRead) {
  std::vector<uint32_t> all;
  for (uint32_t s = 0; s < index_.shards.size(); ++s) all.push_back(s);
  ExpectRead(all, 2);  // consecutive numbers across the files' border: still two reads
  ExpectRead({first_of_5_ - 1, first_of_5_}, 2);
  ExpectRead({0, 1, 3, first_of_5_ + 1, first_of_5_ + 2}, 3);
  ExpectRead({first_of_5_ + 1}, 1);
  ExpectRead({}, 0);
}

TEST_F(ManifestShardsTest, TheWholeManifestReadsFromEveryShardFile) {
  const std::string top = EncodeIndex(index_);
  OpenCounter counter(storage_.get());
  Result<Manifest> whole = WholeManifest(&counter, kDir, top);
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  EXPECT_EQ(whole->version, 6u);
  EXPECT_EQ(EncodeManifest(*whole), EncodeManifest(m_));
  EXPECT_EQ(counter.reads, 2);
  Result<std::string> bytes = WholeManifestBytes(storage_.get(), kDir, top);
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  EXPECT_EQ(*bytes, EncodeManifest(m_));
}

TEST_F(ManifestShardsTest, AMissingShardFileIsAnErrorNamingIt) {
  ASSERT_TRUE(storage_->RemoveFile(kDir + "/data/manifest.5.shards").ok());
  Result<std::vector<std::pair<uint32_t, std::string>>> got =
      ReadShards(storage_.get(), kDir, index_, {0, first_of_5_});
  EXPECT_FALSE(got.ok());
  EXPECT_NE(got.status().message().find("data/manifest.5.shards"), std::string::npos)
      << got.status().ToString();
  ManifestIndex bad = index_;
  bad.shards[0].file = 2;
  EXPECT_EQ(ReadShards(storage_.get(), kDir, bad, {0}).status().code(), StatusCode::kInternal);
}

}  // namespace
}  // namespace shardpoint::internal_source
