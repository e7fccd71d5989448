// The crash model of MemStorage: what survives SimulateCrash() is what a
// POSIX filesystem promises after fsync of files and their directories.
#include "src/io/mem_storage.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shardpoint::internal_io {
namespace {

class MemStorageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(mem_.CreateDirs("/ckpt").ok());
    ASSERT_TRUE(mem_.SyncDir("/").ok());
  }

  // Writes and fsyncs the file, but not its directory.
  void WriteSynced(const std::string& path, const std::string& data) {
    ASSERT_TRUE(mem_.WriteStringToFile(path, data).ok());
  }

  std::string Read(const std::string& path) {
    Result<std::string> data = mem_.ReadFileToString(path);
    return data.ok() ? *data : data.status().ToString();
  }

  bool Exists(const std::string& path) { return *mem_.Exists(path); }

  MemStorage mem_;
};

TEST_F(MemStorageTest, CrashRevertsToLastSyncedBytes) {
  WriteSynced("/ckpt/f", "synced");
  ASSERT_TRUE(mem_.SyncDir("/ckpt").ok());
  Result<std::unique_ptr<WritableFile>> f = mem_.NewWritableFile("/ckpt/f", {});
  ASSERT_TRUE(f.ok());
  ASSERT_TRUE((*f)->WriteAt(0, "unsynced data", 13).ok());
  EXPECT_EQ(Read("/ckpt/f"), "unsynced data");
  mem_.SimulateCrash();
  EXPECT_EQ(Read("/ckpt/f"), "synced");
}

TEST_F(MemStorageTest, FileInUnsyncedDirectoryIsLost) {
  WriteSynced("/ckpt/f", "data");
  mem_.SimulateCrash();
  EXPECT_FALSE(Exists("/ckpt/f"));
  EXPECT_TRUE(Exists("/ckpt"));
}

TEST_F(MemStorageTest, CreatedButNeverSyncedFileSurvivesEmpty) {
  Result<std::unique_ptr<WritableFile>> f = mem_.NewWritableFile("/ckpt/f", {});
  ASSERT_TRUE(f.ok());
  ASSERT_TRUE((*f)->WriteAt(0, "abc", 3).ok());
  ASSERT_TRUE(mem_.SyncDir("/ckpt").ok());
  mem_.SimulateCrash();
  EXPECT_TRUE(Exists("/ckpt/f"));
  EXPECT_EQ(Read("/ckpt/f"), "");
}

TEST_F(MemStorageTest, RenameWithoutSyncDirIsUndone) {
  WriteSynced("/ckpt/manifest", "old");
  ASSERT_TRUE(mem_.SyncDir("/ckpt").ok());
  WriteSynced("/ckpt/manifest.tmp", "new");
  ASSERT_TRUE(mem_.Rename("/ckpt/manifest.tmp", "/ckpt/manifest").ok());
  EXPECT_EQ(Read("/ckpt/manifest"), "new");
  mem_.SimulateCrash();
  EXPECT_EQ(Read("/ckpt/manifest"), "old");
  EXPECT_FALSE(Exists("/ckpt/manifest.tmp"));  // its creation was never made durable
}

TEST_F(MemStorageTest, CommitProtocolSurvivesCrash) {
  WriteSynced("/ckpt/manifest", "old");
  ASSERT_TRUE(mem_.SyncDir("/ckpt").ok());
  WriteSynced("/ckpt/manifest.tmp", "new");
  ASSERT_TRUE(mem_.Rename("/ckpt/manifest.tmp", "/ckpt/manifest").ok());
  ASSERT_TRUE(mem_.SyncDir("/ckpt").ok());
  mem_.SimulateCrash();
  EXPECT_EQ(Read("/ckpt/manifest"), "new");
  EXPECT_EQ(*mem_.ListDir("/ckpt"), std::vector<std::string>{"manifest"});
}

// CreateDirs promises what it creates is durable (as POSIX's, which fsyncs
// each new directory's parent); what arrives in a directory otherwise, a
// file or a directory renamed in, still needs the directory's SyncDir.
TEST_F(MemStorageTest, CreateDirsMakesWhatItCreatesDurable) {
  ASSERT_TRUE(mem_.CreateDirs("/ckpt/data/deep").ok());
  ASSERT_TRUE(mem_.CreateDirs("/ckpt/moved_from").ok());
  WriteSynced("/ckpt/data/deep/f", "x");
  ASSERT_TRUE(mem_.Rename("/ckpt/moved_from", "/ckpt/data/moved").ok());
  mem_.SimulateCrash();
  EXPECT_TRUE(*mem_.IsDirectory("/ckpt/data/deep"));
  EXPECT_FALSE(Exists("/ckpt/data/deep/f"));
  EXPECT_FALSE(Exists("/ckpt/data/moved"));
  EXPECT_TRUE(Exists("/ckpt/moved_from"));
}

TEST_F(MemStorageTest, RemovalWithoutSyncDirIsUndone) {
  WriteSynced("/ckpt/f", "data");
  ASSERT_TRUE(mem_.SyncDir("/ckpt").ok());
  ASSERT_TRUE(mem_.RemoveFile("/ckpt/f").ok());
  mem_.SimulateCrash();
  EXPECT_EQ(Read("/ckpt/f"), "data");
  ASSERT_TRUE(mem_.RemoveAll("/ckpt").ok());
  ASSERT_TRUE(mem_.SyncDir("/").ok());
  mem_.SimulateCrash();
  EXPECT_FALSE(Exists("/ckpt"));
}

TEST_F(MemStorageTest, DirectoryRenameIsDurableAfterParentSync) {
  ASSERT_TRUE(mem_.CreateDirs("/ckpt/tmp").ok());
  WriteSynced("/ckpt/tmp/data", "bytes");
  ASSERT_TRUE(mem_.SyncDir("/ckpt/tmp").ok());
  ASSERT_TRUE(mem_.Rename("/ckpt/tmp", "/ckpt/step_1").ok());
  ASSERT_TRUE(mem_.SyncDir("/ckpt").ok());
  mem_.SimulateCrash();
  EXPECT_EQ(Read("/ckpt/step_1/data"), "bytes");
  EXPECT_FALSE(Exists("/ckpt/tmp"));
}

TEST_F(MemStorageTest, PathsAreNormalized) {
  WriteSynced("//ckpt///f", "x");
  EXPECT_EQ(Read("/ckpt/f"), "x");
  EXPECT_TRUE(*mem_.IsDirectory("/ckpt/"));
  EXPECT_EQ(*mem_.ListDir("/ckpt//"), std::vector<std::string>{"f"});
  Result<std::unique_ptr<WritableFile>> f = mem_.NewWritableFile("/ckpt//g", {});
  ASSERT_TRUE(f.ok());
  EXPECT_EQ((*f)->path(), "/ckpt/g");
  EXPECT_EQ(mem_.CreateDirs("/a/../b").code(), StatusCode::kInvalidArgument);
}

TEST_F(MemStorageTest, WritingIntoAFileOrMissingDirectoryFails) {
  WriteSynced("/ckpt/f", "x");
  Result<std::unique_ptr<WritableFile>> f = mem_.NewWritableFile("/ckpt/f/g", {});
  EXPECT_EQ(f.status().code(), StatusCode::kIOError);
  EXPECT_THAT(f.status().message(), ::testing::HasSubstr("Not a directory"));
  f = mem_.NewWritableFile("/ckpt", {});
  EXPECT_EQ(f.status().code(), StatusCode::kIOError);
  EXPECT_EQ(mem_.RemoveFile("/ckpt").code(), StatusCode::kIOError);
}

TEST_F(MemStorageTest, RenameRefusesToReplaceNonEmptyDirectory) {
  ASSERT_TRUE(mem_.CreateDirs("/a").ok());
  ASSERT_TRUE(mem_.CreateDirs("/b").ok());
  WriteSynced("/b/f", "x");
  Status s = mem_.Rename("/a", "/b");
  EXPECT_EQ(s.code(), StatusCode::kIOError);
  EXPECT_THAT(s.message(), ::testing::HasSubstr("Directory not empty"));
  EXPECT_EQ(mem_.Rename("/a", "/a/inside").code(), StatusCode::kIOError);
  EXPECT_EQ(mem_.Rename("/b/f", "/a").code(), StatusCode::kIOError);
}

TEST(NewMemStorageTest, ReturnsAnEmptyStore) {
  std::unique_ptr<Storage> storage = NewMemStorage();
  EXPECT_TRUE(storage->ListDir("/")->empty());
  EXPECT_TRUE(storage->WriteStringToFile("top", "x").ok());
  EXPECT_EQ(*storage->ListDir(""), std::vector<std::string>{"top"});
}

}  // namespace
}  // namespace shardpoint::internal_io
