// Conformance tests run against every Storage implementation: POSIX in a
// fresh temporary directory and the in-memory store.
#include "shardpoint/storage.h"

#include <stdlib.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/io/mem_storage.h"

namespace shardpoint {
namespace {

using ::testing::HasSubstr;

enum class Kind { kPosix, kMem };

class StorageConformanceTest : public ::testing::TestWithParam<Kind> {
 protected:
  void SetUp() override {
    if (GetParam() == Kind::kPosix) {
      char tmpl[] = "/tmp/shardpoint_storage_test_XXXXXX";
      ASSERT_NE(mkdtemp(tmpl), nullptr);
      root_ = tmpl;
      storage_ = DefaultStorage();
    } else {
      mem_ = NewMemStorage();
      storage_ = mem_.get();
      root_ = "/mem";
      ASSERT_TRUE(storage_->CreateDirs(root_).ok());
    }
  }
  void TearDown() override {
    if (GetParam() == Kind::kPosix) {
      EXPECT_TRUE(storage_->RemoveAll(root_).ok());
    }
  }

  std::string Path(const std::string& name) const { return root_ + "/" + name; }

  std::string Read(const std::string& path) {
    Result<std::string> data = storage_->ReadFileToString(path);
    EXPECT_TRUE(data.ok()) << data.status().ToString();
    return data.ok() ? *data : "<error>";
  }

  void Write(const std::string& path, const std::string& data) {
    Status s = storage_->WriteStringToFile(path, data);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }

  std::unique_ptr<WritableFile> Open(const std::string& path) {
    Result<std::unique_ptr<WritableFile>> file = storage_->NewWritableFile(path, {});
    EXPECT_TRUE(file.ok()) << file.status().ToString();
    return file.ok() ? std::move(*file) : nullptr;
  }

  std::unique_ptr<Storage> mem_;
  Storage* storage_ = nullptr;
  std::string root_;
};

TEST_P(StorageConformanceTest, WriteReadRoundTrip) {
  std::string data(100000, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 7);
  Write(Path("f"), data);
  EXPECT_EQ(Read(Path("f")), data);
  Write(Path("empty"), "");
  EXPECT_EQ(Read(Path("empty")), "");
}

TEST_P(StorageConformanceTest, WriteAtOffsetsLeavesZeroHoles) {
  std::unique_ptr<WritableFile> f = Open(Path("f"));
  ASSERT_NE(f, nullptr);
  EXPECT_FALSE(f->direct());
  EXPECT_EQ(f->alignment(), 1u);
  EXPECT_EQ(f->path(), Path("f"));
  ASSERT_TRUE(f->WriteAt(10, "abc", 3).ok());
  ASSERT_TRUE(f->WriteAt(0, "xy", 2).ok());
  ASSERT_TRUE(f->Sync().ok());
  ASSERT_TRUE(f->Close().ok());
  EXPECT_EQ(Read(Path("f")), std::string("xy") + std::string(8, '\0') + "abc");
}

TEST_P(StorageConformanceTest, ReadAtAndSize) {
  Write(Path("f"), "0123456789");
  Result<std::unique_ptr<ReadableFile>> f = storage_->NewReadableFile(Path("f"));
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ((*f)->path(), Path("f"));
  Result<uint64_t> size = (*f)->Size();
  ASSERT_TRUE(size.ok());
  EXPECT_EQ(*size, 10u);
  char buf[4];
  ASSERT_TRUE((*f)->ReadAt(3, 4, buf).ok());
  EXPECT_EQ(std::string(buf, 4), "3456");
  EXPECT_TRUE((*f)->ReadAt(10, 0, buf).ok());
}

TEST_P(StorageConformanceTest, ShortReadIsDataLossNamingTheRange) {
  Write(Path("f"), "0123456789");
  Result<std::unique_ptr<ReadableFile>> f = storage_->NewReadableFile(Path("f"));
  ASSERT_TRUE(f.ok());
  char buf[16];
  Status s = (*f)->ReadAt(5, 10, buf);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("file " + Path("f") + ": short read at bytes [5, 15)"));
  EXPECT_THAT(s.message(), HasSubstr("file has only 10 bytes"));
  s = (*f)->ReadAt(20, 1, buf);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("[20, 21)"));
}

TEST_P(StorageConformanceTest, TruncateShrinksAndGrows) {
  std::unique_ptr<WritableFile> f = Open(Path("f"));
  ASSERT_NE(f, nullptr);
  ASSERT_TRUE(f->WriteAt(0, "0123456789", 10).ok());
  ASSERT_TRUE(f->Truncate(4).ok());
  EXPECT_EQ(Read(Path("f")), "0123");
  ASSERT_TRUE(f->Truncate(6).ok());
  EXPECT_EQ(Read(Path("f")), std::string("0123") + std::string(2, '\0'));
  ASSERT_TRUE(f->Sync().ok());
}

TEST_P(StorageConformanceTest, NewWritableFileTruncatesExisting) {
  Write(Path("f"), "long old contents");
  Write(Path("f"), "new");
  EXPECT_EQ(Read(Path("f")), "new");
}

TEST_P(StorageConformanceTest, CloseIsIdempotentAndWritesAfterCloseFail) {
  std::unique_ptr<WritableFile> f = Open(Path("f"));
  ASSERT_NE(f, nullptr);
  ASSERT_TRUE(f->Close().ok());
  ASSERT_TRUE(f->Close().ok());
  Status s = f->WriteAt(0, "x", 1);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr(Path("f")));
  EXPECT_FALSE(f->Sync().ok());
  EXPECT_FALSE(f->Truncate(0).ok());
}

TEST_P(StorageConformanceTest, ConcurrentWritesAtDisjointRanges) {
  std::unique_ptr<WritableFile> f = Open(Path("f"));
  ASSERT_NE(f, nullptr);
  constexpr int kThreads = 8;
  constexpr size_t kPiece = 4096;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&f, t] {
      std::string piece(kPiece, static_cast<char>('a' + t));
      EXPECT_TRUE(f->WriteAt(t * kPiece, piece.data(), piece.size()).ok());
    });
  }
  for (std::thread& t : threads) t.join();
  ASSERT_TRUE(f->Close().ok());
  std::string expected;
  for (int t = 0; t < kThreads; ++t) expected += std::string(kPiece, static_cast<char>('a' + t));
  EXPECT_EQ(Read(Path("f")), expected);
}

TEST_P(StorageConformanceTest, RenameReplacesTargetAtomically) {
  Write(Path("manifest"), "old");
  Write(Path("manifest.tmp"), "new");
  // A reader opened before the rename keeps the file it opened.
  Result<std::unique_ptr<ReadableFile>> old_reader = storage_->NewReadableFile(Path("manifest"));
  ASSERT_TRUE(old_reader.ok());
  ASSERT_TRUE(storage_->Rename(Path("manifest.tmp"), Path("manifest")).ok());
  EXPECT_EQ(Read(Path("manifest")), "new");
  EXPECT_FALSE(*storage_->Exists(Path("manifest.tmp")));
  char buf[3];
  ASSERT_TRUE((*old_reader)->ReadAt(0, 3, buf).ok());
  EXPECT_EQ(std::string(buf, 3), "old");
  ASSERT_TRUE(storage_->SyncDir(root_).ok());
}

TEST_P(StorageConformanceTest, RenameMovesDirectories) {
  ASSERT_TRUE(storage_->CreateDirs(Path("tmp/data")).ok());
  Write(Path("tmp/data/0"), "zero");
  ASSERT_TRUE(storage_->Rename(Path("tmp"), Path("final")).ok());
  EXPECT_EQ(Read(Path("final/data/0")), "zero");
  EXPECT_FALSE(*storage_->Exists(Path("tmp")));
}

TEST_P(StorageConformanceTest, ExchangeSwapsTwoDirectoriesOrChangesNothing) {
  ASSERT_TRUE(storage_->CreateDirs(Path("ckpt")).ok());
  ASSERT_TRUE(storage_->CreateDirs(Path("ckpt.partial")).ok());
  Write(Path("ckpt/manifest"), "old");
  Write(Path("ckpt.partial/manifest"), "new");
  Result<bool> swapped = storage_->Exchange(Path("ckpt"), Path("ckpt.partial"));
  ASSERT_TRUE(swapped.ok()) << swapped.status().ToString();
  if (*swapped) {
    EXPECT_EQ(Read(Path("ckpt/manifest")), "new");
    EXPECT_EQ(Read(Path("ckpt.partial/manifest")), "old");
  } else {  // the filesystem cannot: nothing moved
    EXPECT_EQ(Read(Path("ckpt/manifest")), "old");
    EXPECT_EQ(Read(Path("ckpt.partial/manifest")), "new");
  }
}

TEST_P(StorageConformanceTest, RenameOfMissingFileIsNotFound) {
  Status s = storage_->Rename(Path("nope"), Path("x"));
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr(Path("nope")));
}

TEST_P(StorageConformanceTest, ListDirIsSortedAndComplete) {
  Write(Path("c"), "");
  Write(Path("a"), "");
  ASSERT_TRUE(storage_->CreateDirs(Path("b/inner")).ok());
  Write(Path("b/inner/x"), "");
  Result<std::vector<std::string>> names = storage_->ListDir(root_);
  ASSERT_TRUE(names.ok()) << names.status().ToString();
  EXPECT_EQ(*names, (std::vector<std::string>{"a", "b", "c"}));
  names = storage_->ListDir(Path("b/inner"));
  ASSERT_TRUE(names.ok());
  EXPECT_EQ(*names, std::vector<std::string>{"x"});
  ASSERT_TRUE(storage_->CreateDirs(Path("empty")).ok());
  names = storage_->ListDir(Path("empty"));
  ASSERT_TRUE(names.ok());
  EXPECT_TRUE(names->empty());
}

TEST_P(StorageConformanceTest, ExistsAndIsDirectory) {
  Write(Path("file"), "x");
  ASSERT_TRUE(storage_->CreateDirs(Path("dir/sub")).ok());
  ASSERT_TRUE(storage_->CreateDirs(Path("dir/sub")).ok());  // idempotent
  ASSERT_TRUE(storage_->CreateDirs(Path("dir//sub/")).ok());
  EXPECT_TRUE(*storage_->Exists(Path("file")));
  EXPECT_FALSE(*storage_->IsDirectory(Path("file")));
  EXPECT_TRUE(*storage_->Exists(Path("dir/sub")));
  EXPECT_TRUE(*storage_->IsDirectory(Path("dir")));
  EXPECT_TRUE(*storage_->IsDirectory(Path("dir/sub")));
  EXPECT_FALSE(*storage_->Exists(Path("missing")));
  EXPECT_FALSE(*storage_->IsDirectory(Path("missing")));
  EXPECT_FALSE(*storage_->Exists(Path("file/below")));
}

TEST_P(StorageConformanceTest, MissingPathsAreNotFoundNamingThePath) {
  Result<std::unique_ptr<ReadableFile>> r = storage_->NewReadableFile(Path("missing"));
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(r.status().message(), HasSubstr(Path("missing")));
  Result<std::unique_ptr<WritableFile>> w = storage_->NewWritableFile(Path("no/dir/f"), {});
  EXPECT_EQ(w.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(w.status().message(), HasSubstr(Path("no/dir/f")));
  Status s = storage_->RemoveFile(Path("missing"));
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr(Path("missing")));
  Result<std::vector<std::string>> names = storage_->ListDir(Path("missing"));
  EXPECT_EQ(names.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(names.status().message(), HasSubstr(Path("missing")));
  s = storage_->SyncDir(Path("missing"));
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
}

TEST_P(StorageConformanceTest, CreateDirsThroughAFileFails) {
  Write(Path("file"), "x");
  Status s = storage_->CreateDirs(Path("file/sub"));
  EXPECT_EQ(s.code(), StatusCode::kIOError);
  EXPECT_THAT(s.message(), HasSubstr(Path("file")));
  Result<std::vector<std::string>> names = storage_->ListDir(Path("file"));
  EXPECT_EQ(names.status().code(), StatusCode::kIOError);
}

TEST_P(StorageConformanceTest, RemoveFileAndRemoveAll) {
  Write(Path("f"), "x");
  ASSERT_TRUE(storage_->RemoveFile(Path("f")).ok());
  EXPECT_FALSE(*storage_->Exists(Path("f")));
  ASSERT_TRUE(storage_->CreateDirs(Path("tree/a/b")).ok());
  Write(Path("tree/a/b/f"), "x");
  Write(Path("tree/g"), "y");
  ASSERT_TRUE(storage_->CreateDirs(Path("tree2")).ok());
  ASSERT_TRUE(storage_->RemoveAll(Path("tree")).ok());
  EXPECT_FALSE(*storage_->Exists(Path("tree")));
  EXPECT_TRUE(*storage_->Exists(Path("tree2")));
  EXPECT_TRUE(storage_->RemoveAll(Path("tree")).ok());  // already gone
  EXPECT_TRUE(storage_->RemoveAll(Path("never/existed")).ok());
}

TEST_P(StorageConformanceTest, LockIsExclusiveUntilUnlockedOrDestroyed) {
  Result<std::unique_ptr<FileLock>> first = storage_->LockFile(Path("LOCK"));
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ((*first)->path(), Path("LOCK"));
  EXPECT_TRUE(*storage_->Exists(Path("LOCK")));
  Result<std::unique_ptr<FileLock>> second = storage_->LockFile(Path("LOCK"));
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(second.status().message(), HasSubstr("'" + Path("LOCK") + "' is held by"));
  // Another file is another lock.
  Result<std::unique_ptr<FileLock>> other = storage_->LockFile(Path("LOCK2"));
  ASSERT_TRUE(other.ok()) << other.status().ToString();
  // UnlockFile releases it and removes the file.
  ASSERT_TRUE(storage_->UnlockFile(std::move(*first)).ok());
  EXPECT_FALSE(*storage_->Exists(Path("LOCK")));
  Result<std::unique_ptr<FileLock>> third = storage_->LockFile(Path("LOCK"));
  ASSERT_TRUE(third.ok()) << third.status().ToString();
  // Destroying the lock object releases it too (as a process exit would).
  third->reset();
  Result<std::unique_ptr<FileLock>> fourth = storage_->LockFile(Path("LOCK"));
  EXPECT_TRUE(fourth.ok()) << fourth.status().ToString();
}

TEST_P(StorageConformanceTest, LockFileInAMissingDirectoryIsNotFound) {
  Result<std::unique_ptr<FileLock>> lock = storage_->LockFile(Path("no/dir/LOCK"));
  EXPECT_EQ(lock.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(lock.status().message(), HasSubstr(Path("no/dir/LOCK")));
}

TEST_P(StorageConformanceTest, ManyThreadsRacingForOneLockNeverShareIt) {
  std::atomic<int> inside{0};
  std::atomic<int> max_inside{0};
  std::atomic<int> taken{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 50; ++i) {
        Result<std::unique_ptr<FileLock>> lock = storage_->LockFile(Path("LOCK"));
        if (!lock.ok()) {
          EXPECT_EQ(lock.status().code(), StatusCode::kFailedPrecondition)
              << lock.status().ToString();
          continue;
        }
        ++taken;
        int now = ++inside;
        int seen = max_inside.load();
        while (now > seen && !max_inside.compare_exchange_weak(seen, now)) {
        }
        --inside;
        EXPECT_TRUE(storage_->UnlockFile(std::move(*lock)).ok());
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(max_inside.load(), 1);
  EXPECT_GT(taken.load(), 0);
}

INSTANTIATE_TEST_SUITE_P(AllStorages, StorageConformanceTest,
                         ::testing::Values(Kind::kPosix, Kind::kMem),
                         [](const ::testing::TestParamInfo<Kind>& info) {
                           return info.param == Kind::kPosix ? "Posix" : "Mem";
                         });

}  // namespace
}  // namespace shardpoint
