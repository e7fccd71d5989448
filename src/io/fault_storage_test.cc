#include "src/io/fault_storage.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shardpoint::internal_io {
namespace {

class FaultStorageTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(fault_.CreateDirs("/d").ok()); }

  std::unique_ptr<Storage> base_ = NewMemStorage();
  FaultStorage fault_{base_.get()};
};

TEST_F(FaultStorageTest, NthWriteAndLaterOnesFail) {
  fault_.FailWritesFrom(3);
  Result<std::unique_ptr<WritableFile>> a = fault_.NewWritableFile("/d/a", {});
  Result<std::unique_ptr<WritableFile>> b = fault_.NewWritableFile("/d/b", {});
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE((*a)->WriteAt(0, "1234", 4).ok());
  EXPECT_TRUE((*b)->WriteAt(0, "1234", 4).ok());
  Status s = (*a)->WriteAt(8, "5678", 4);
  EXPECT_EQ(s.code(), StatusCode::kIOError);
  EXPECT_EQ(s.message(), "write /d/a at bytes [8, 12): No space left on device (injected)");
  EXPECT_FALSE((*b)->WriteAt(4, "x", 1).ok());
  EXPECT_EQ(fault_.writes(), 4);
  // A failed write wrote nothing.
  EXPECT_EQ(*base_->ReadFileToString("/d/a"), "1234");
  fault_.FailWritesFrom(0);
  EXPECT_TRUE((*a)->WriteAt(4, "5", 1).ok());
}

TEST_F(FaultStorageTest, ConvenienceWriteFailsToo) {
  fault_.FailWritesFrom(1);
  Status s = fault_.WriteStringToFile("/d/manifest", "x");
  EXPECT_EQ(s.code(), StatusCode::kIOError);
  EXPECT_THAT(s.message(), ::testing::HasSubstr("/d/manifest"));
  EXPECT_THAT(s.message(), ::testing::HasSubstr("(injected)"));
}

TEST_F(FaultStorageTest, RenameToSuffixFails) {
  ASSERT_TRUE(fault_.WriteStringToFile("/d/manifest.tmp", "new").ok());
  ASSERT_TRUE(fault_.WriteStringToFile("/d/other.tmp", "x").ok());
  fault_.FailRenameTo("/manifest");
  Status s = fault_.Rename("/d/manifest.tmp", "/d/manifest");
  EXPECT_EQ(s.code(), StatusCode::kIOError);
  EXPECT_EQ(s.message(), "rename /d/manifest.tmp to /d/manifest: Input/output error (injected)");
  EXPECT_TRUE(*fault_.Exists("/d/manifest.tmp"));
  EXPECT_FALSE(*fault_.Exists("/d/manifest"));
  EXPECT_TRUE(fault_.Rename("/d/other.tmp", "/d/other").ok());
  fault_.FailRenameTo("");
  EXPECT_TRUE(fault_.Rename("/d/manifest.tmp", "/d/manifest").ok());
}

TEST_F(FaultStorageTest, SyncsFail) {
  fault_.FailSyncs(true);
  Status s = fault_.WriteStringToFile("/d/f", "x");
  EXPECT_EQ(s.code(), StatusCode::kIOError);
  EXPECT_EQ(s.message(), "fsync /d/f: Input/output error (injected)");
  fault_.FailSyncs(false);
  EXPECT_TRUE(fault_.WriteStringToFile("/d/f", "x").ok());
}

TEST_F(FaultStorageTest, NthReadFails) {
  ASSERT_TRUE(fault_.WriteStringToFile("/d/f", "0123456789").ok());
  fault_.FailReadsFrom(2);
  Result<std::unique_ptr<ReadableFile>> f = fault_.NewReadableFile("/d/f");
  ASSERT_TRUE(f.ok());
  char buf[4];
  EXPECT_TRUE((*f)->ReadAt(0, 4, buf).ok());
  Status s = (*f)->ReadAt(2, 4, buf);
  EXPECT_EQ(s.code(), StatusCode::kIOError);
  EXPECT_EQ(s.message(), "read /d/f at bytes [2, 6): Input/output error (injected)");
  EXPECT_EQ(fault_.reads(), 2);
  EXPECT_EQ(fault_.ReadFileToString("/d/f").status().code(), StatusCode::kIOError);
}

TEST_F(FaultStorageTest, ForwardsEverythingElse) {
  ASSERT_TRUE(fault_.CreateDirs("/d/sub").ok());
  ASSERT_TRUE(fault_.WriteStringToFile("/d/f", "x").ok());
  EXPECT_TRUE(fault_.SyncDir("/d").ok());
  EXPECT_EQ(*fault_.ListDir("/d"), (std::vector<std::string>{"f", "sub"}));
  EXPECT_TRUE(*fault_.IsDirectory("/d/sub"));
  EXPECT_TRUE(fault_.RemoveFile("/d/f").ok());
  EXPECT_FALSE(*fault_.Exists("/d/f"));
  EXPECT_TRUE(fault_.RemoveAll("/d").ok());
  EXPECT_FALSE(*base_->Exists("/d"));
}

}  // namespace
}  // namespace shardpoint::internal_io
