// StagedOutput: refusal of an existing output, atomic replacement, and a
// crash at every mutating step (in memory, with MemStorage's crash model)
// leaving the old output or the new one, whole, never a mix or a half.
#include "src/io/staged_output.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>

#include "src/io/mem_storage.h"

namespace shardpoint::internal_io {
namespace {

using ::testing::HasSubstr;

// An output of version `v`: files "a" and "b" whose bytes name the version
// (b only from version 2 on, so a mix of two versions is visible).
Status WriteVersion(Storage* s, const std::string& dir, int v) {
  SP_RETURN_IF_ERROR(s->WriteStringToFile(dir + "/a", "a" + std::to_string(v)));
  if (v >= 2) SP_RETURN_IF_ERROR(s->WriteStringToFile(dir + "/b", "b" + std::to_string(v)));
  return OkStatus();
}

// The version `dir` holds whole, 0 if it does not exist, -1 if it holds
// anything else (a mix, a half, a stray file).
int VersionAt(Storage* s, const std::string& dir) {
  Result<bool> e = s->Exists(dir);
  if (!e.ok() || !*e) return 0;
  Result<std::vector<std::string>> names = s->ListDir(dir);
  if (!names.ok()) return -1;
  Result<std::string> a = s->ReadFileToString(dir + "/a");
  if (!a.ok() || a->size() != 2) return -1;
  const int v = (*a)[1] - '0';
  if (*names != (v >= 2 ? std::vector<std::string>{"a", "b"} : std::vector<std::string>{"a"})) {
    return -1;
  }
  if (v >= 2) {
    Result<std::string> b = s->ReadFileToString(dir + "/b");
    if (!b.ok() || *b != "b" + std::to_string(v)) return -1;
  }
  return v;
}

Status Export(Storage* s, const std::string& dst, int v, bool overwrite) {
  SP_ASSIGN_OR_RETURN(StagedOutput out, StagedOutput::Begin(s, dst, overwrite, "test export"));
  SP_RETURN_IF_ERROR(WriteVersion(s, out.dir(), v));
  return out.Commit();
}

TEST(StagedOutputTest, WritesANewOutputAndLeavesNothingElse) {
  MemStorage s;
  ASSERT_TRUE(s.CreateDirs("root").ok());
  ASSERT_TRUE(Export(&s, "root/out", 1, false).ok());
  EXPECT_EQ(VersionAt(&s, "root/out"), 1);
  EXPECT_EQ(s.ListDir("root").value(), std::vector<std::string>{"out"});
}

TEST(StagedOutputTest, RefusesANonEmptyDestinationAndWritesNothing) {
  MemStorage s;
  ASSERT_TRUE(s.CreateDirs("root").ok());
  ASSERT_TRUE(Export(&s, "root/out", 1, false).ok());
  Status st = Export(&s, "root/out", 2, false);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.ToString();
  EXPECT_THAT(st.message(), HasSubstr("'root/out' exists and is not empty"));
  EXPECT_THAT(st.message(), HasSubstr("overwrite"));
  EXPECT_EQ(VersionAt(&s, "root/out"), 1);
  EXPECT_EQ(s.ListDir("root").value(), std::vector<std::string>{"out"});
  // A file where the directory should be is refused even with overwrite.
  ASSERT_TRUE(s.WriteStringToFile("root/file", "x").ok());
  st = Export(&s, "root/file", 2, true);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.ToString();
  EXPECT_THAT(st.message(), HasSubstr("not a directory"));
}

TEST(StagedOutputTest, TakesAnEmptyDirectoryAndOverwritesWhole) {
  MemStorage s;
  ASSERT_TRUE(s.CreateDirs("root/out").ok());
  ASSERT_TRUE(Export(&s, "root/out/", 2, false).ok());  // empty: no overwrite needed
  EXPECT_EQ(VersionAt(&s, "root/out"), 2);
  ASSERT_TRUE(Export(&s, "root/out", 1, true).ok());  // v2's "b" must not survive
  EXPECT_EQ(VersionAt(&s, "root/out"), 1);
  EXPECT_EQ(s.ListDir("root").value(), std::vector<std::string>{"out"});
}

TEST(StagedOutputTest, AFailureBeforeCommitRemovesThePartialAndKeepsTheOld) {
  MemStorage s;
  ASSERT_TRUE(Export(&s, "out", 1, false).ok());
  {
    Result<StagedOutput> out = StagedOutput::Begin(&s, "out", true, "test export");
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    ASSERT_TRUE(WriteVersion(&s, out->dir(), 2).ok());
    EXPECT_EQ(VersionAt(&s, "out.partial"), 2);
  }  // not committed
  EXPECT_FALSE(s.Exists("out.partial").value());
  EXPECT_EQ(VersionAt(&s, "out"), 1);
}

// Fails every mutating call from the k-th on (a process killed there), and
// refuses Exchange when `exchange` is false (the two-rename fallback).
class DyingStorage : public StorageWrapper {
 public:
  DyingStorage(Storage* base, bool exchange, int die_at)
      : StorageWrapper(base), exchange_(exchange), die_at_(die_at) {}
  bool died() const { return steps_ >= die_at_; }
  Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& p,
                                                        const WriteFileOptions& o) override {
    SP_RETURN_IF_ERROR(Step());
    return StorageWrapper::NewWritableFile(p, o);
  }
  Status CreateDirs(const std::string& p) override {
    SP_RETURN_IF_ERROR(Step());
    return StorageWrapper::CreateDirs(p);
  }
  Status SyncDir(const std::string& p) override {
    SP_RETURN_IF_ERROR(Step());
    return StorageWrapper::SyncDir(p);
  }
  Status Rename(const std::string& a, const std::string& b) override {
    SP_RETURN_IF_ERROR(Step());
    return StorageWrapper::Rename(a, b);
  }
  Result<bool> Exchange(const std::string& a, const std::string& b) override {
    SP_RETURN_IF_ERROR(Step());
    if (!exchange_) return false;
    return StorageWrapper::Exchange(a, b);
  }
  Status RemoveFile(const std::string& p) override {
    SP_RETURN_IF_ERROR(Step());
    return StorageWrapper::RemoveFile(p);
  }
  Status RemoveAll(const std::string& p) override {
    SP_RETURN_IF_ERROR(Step());
    return StorageWrapper::RemoveAll(p);
  }

 private:
  Status Step() { return steps_++ >= die_at_ ? IOError("killed") : OkStatus(); }
  bool exchange_;
  int die_at_;
  int steps_ = 0;
};

// For every step k of an overwrite (and of a first export): kill there,
// lose what was not durable, then look. `out` holds v1 or v2 whole; or,
// only inside the fallback's two renames, nothing, which the next Begin
// (or RecoverSwap) turns into v2. The next export then succeeds.
void CrashAtEveryStep(bool exchange, bool first) {
  int completed_at = -1;
  for (int k = 0; k < 100 && completed_at < 0; ++k) {
    SCOPED_TRACE("kill at step " + std::to_string(k));
    MemStorage mem;
    ASSERT_TRUE(mem.CreateDirs("root").ok());
    ASSERT_TRUE(mem.SyncDir(".").ok());
    if (!first) {
      ASSERT_TRUE(Export(&mem, "root/out", 1, false).ok());
    }
    DyingStorage dying(&mem, exchange, k);
    Status st = Export(&dying, "root/out", 2, /*overwrite=*/true);
    if (!dying.died()) {
      ASSERT_TRUE(st.ok()) << st.ToString();
      completed_at = k;
    }
    mem.SimulateCrash();
    const int v = VersionAt(&mem, "root/out");
    ASSERT_TRUE(v == 2 || v == (first ? 0 : 1) || (v == 0 && !exchange && !first)) << v;
    if (v == 0 && !first) {
      // Between the fallback's renames: the next run completes the swap.
      ASSERT_TRUE(RecoverSwap(
                      &mem, "root/out", [](const std::string&) -> Result<bool> { return true; },
                      [&](const std::string& d) { return mem.RemoveAll(d); })
                      .value());
      ASSERT_EQ(VersionAt(&mem, "root/out"), 2);
    }
    ASSERT_TRUE(Export(&mem, "root/out", 3, true).ok());
    EXPECT_EQ(VersionAt(&mem, "root/out"), 3);
    EXPECT_EQ(mem.ListDir("root").value(), std::vector<std::string>{"out"});
  }
  EXPECT_GT(completed_at, 3);  // the loop reached a run that nothing killed
}

TEST(StagedOutputTest, CrashAtEveryStepOfAnOverwrite) { CrashAtEveryStep(true, false); }
TEST(StagedOutputTest, CrashAtEveryStepOfAnOverwriteWithoutExchange) {
  CrashAtEveryStep(false, false);
}
TEST(StagedOutputTest, CrashAtEveryStepOfAFirstExport) { CrashAtEveryStep(true, true); }

TEST(StagedOutputTest, BeginCompletesASwapInterruptedBetweenItsRenames) {
  MemStorage s;
  ASSERT_TRUE(Export(&s, "out", 1, false).ok());
  ASSERT_TRUE(s.CreateDirs("new").ok());
  ASSERT_TRUE(WriteVersion(&s, "new", 2).ok());
  ASSERT_TRUE(s.Rename("out", "out.old").ok());  // the fallback's first rename
  ASSERT_TRUE(s.Rename("new", "out.partial").ok());
  // Refused (out is v2 again, not empty), but the swap was completed first.
  Status st = Export(&s, "out", 3, false);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.ToString();
  EXPECT_EQ(VersionAt(&s, "out"), 2);
  EXPECT_FALSE(s.Exists("out.old").value());
  EXPECT_FALSE(s.Exists("out.partial").value());
}

}  // namespace
}  // namespace shardpoint::internal_io
