// Opening a checkpoint on a storage that reads small files whole in one
// request (an object store, src/io/whole_file.h): the manifest is read once,
// with no existence check (kind detection's, ReadManifestFile's) or size
// query; a storage without it (POSIX) still checks first; a missing
// checkpoint is NotFound naming its manifest either way.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "shardpoint/checkpoint.h"
#include "shardpoint/comm.h"
#include "src/io/whole_file.h"
#include "src/source/mapped_source.h"
#include "src/source/open_source.h"

namespace shardpoint::internal_source {
namespace {

// Counts existence checks and whole-file reads; reads whole files only if
// `whole`, as an object store does.
class ProbeStorage : public StorageWrapper, public internal_io::WholeFileRead {
 public:
  ProbeStorage(Storage* base, bool whole) : StorageWrapper(base), whole_(whole) {}
  std::atomic<int> exists{0}, whole_reads{0};

  Result<bool> Exists(const std::string& p) override {
    ++exists;
    return base()->Exists(p);
  }
  bool ReadsWholeFiles(const std::string&) override { return whole_; }
  Result<std::optional<std::string>> ReadWholeFile(const std::string& p) override {
    ++whole_reads;
    return internal_io::ReadFileIfPresent(base(), p);
  }

 private:
  const bool whole_;
};

class WholeReadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::vector<float> a(64, 3.5f);
    State s;
    LocalTensor t;
    t.dtype = DType::kF32;
    t.shape = {64};
    t.data = a.data();
    t.segments = {Segment{"w", t.shape, Box::Whole(t.shape), Shape(1, 0)}};
    s.tensors.push_back(t);
    SaveOptions so;
    so.storage = mem_.get();
    auto comm = MakeSingleComm();
    ASSERT_TRUE(Save(s, "ck", *comm, so).ok());
  }
  std::unique_ptr<Storage> mem_ = NewMemStorage();
};

TEST_F(WholeReadTest, ObjectStoreOpensWithOneReadAndNoExistenceCheck) {
  ProbeStorage s(mem_.get(), true);
  Result<std::string> bytes = ReadSourceBytes(&s, "ck");
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  EXPECT_EQ((*bytes)[0], 'S');
  Result<Source> src = OpenCheckpointSource(&s, "ck");
  ASSERT_TRUE(src.ok()) << src.status().ToString();
  Result<MappedSource> mapped = OpenSource(&s, "ck", HfMapping{}, {});
  ASSERT_TRUE(mapped.ok()) << mapped.status().ToString();
  EXPECT_EQ(mapped->checkpoint_kind, CheckpointKind::kShardpoint);
  EXPECT_EQ(mapped->index.tensors.size(), 1u);
  EXPECT_EQ(s.exists.load(), 0);
  EXPECT_EQ(s.whole_reads.load(), 3);
}

TEST_F(WholeReadTest, PosixStillChecksFirstAndMissingIsNotFoundNamingTheManifest) {
  ProbeStorage posix(mem_.get(), false);
  ASSERT_TRUE(ReadSourceBytes(&posix, "ck").ok());
  EXPECT_GT(posix.exists.load(), 0);
  EXPECT_EQ(posix.whole_reads.load(), 0);
  for (bool whole : {false, true}) {
    ProbeStorage s(mem_.get(), whole);
    Result<std::string> missing = ReadSourceBytes(&s, "nothing");
    EXPECT_EQ(missing.status().code(), StatusCode::kNotFound) << missing.status().ToString();
    EXPECT_NE(missing.status().message().find("nothing/manifest"), std::string::npos)
        << missing.status().ToString();
  }
}

}  // namespace
}  // namespace shardpoint::internal_source
