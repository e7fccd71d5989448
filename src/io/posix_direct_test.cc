// O_DIRECT writes through DefaultStorage, in /tmp, /dev/shm (tmpfs, which
// refused O_DIRECT before Linux 6.6) and the current directory (usually a disk
// filesystem). Either way the file must work; direct() only says which path
// was taken.
#include <linux/magic.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/vfs.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "gtest/gtest.h"
#include "shardpoint/storage.h"
#include "src/io/aligned_buffer.h"

namespace shardpoint {
namespace {

using internal_io::AlignedBuffer;
using internal_io::kDirectIoAlignment;

class PosixDirectTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (!*DefaultStorage()->IsDirectory(GetParam())) GTEST_SKIP() << "no " << GetParam();
    std::string tmpl = GetParam() + "/shardpoint_direct_test_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr) << tmpl;
    dir_ = tmpl;
  }
  void TearDown() override {
    if (!dir_.empty()) {
      EXPECT_TRUE(DefaultStorage()->RemoveAll(dir_).ok());
    }
  }

  std::string dir_;
};

AlignedBuffer Pattern(size_t size, int seed) {
  AlignedBuffer buffer(size);
  for (size_t i = 0; i < buffer.size(); ++i) buffer.data()[i] = static_cast<char>(i * 31 + seed);
  return buffer;
}

TEST_P(PosixDirectTest, AlignedWritesReadBackEqual) {
  Storage* storage = DefaultStorage();
  const std::string path = dir_ + "/data";
  Result<std::unique_ptr<WritableFile>> f = storage->NewWritableFile(path, {.direct = true});
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  WritableFile& file = **f;
  RecordProperty("direct", file.direct() ? "true" : "false");
  EXPECT_EQ(file.alignment(), file.direct() ? kDirectIoAlignment : 1u);

  // Two aligned pieces, written out of order, then the tail trimmed to a size
  // that is not a multiple of the alignment (how a data file ends).
  const size_t piece = 3 * kDirectIoAlignment;
  AlignedBuffer first = Pattern(piece, 1);
  AlignedBuffer second = Pattern(piece, 2);
  ASSERT_TRUE(file.WriteAt(piece, second.data(), piece).ok());
  ASSERT_TRUE(file.WriteAt(0, first.data(), piece).ok());
  const uint64_t size = 2 * piece - 100;
  ASSERT_TRUE(file.Truncate(size).ok());
  ASSERT_TRUE(file.Sync().ok());
  ASSERT_TRUE(file.Close().ok());

  Result<std::string> data = storage->ReadFileToString(path);
  ASSERT_TRUE(data.ok()) << data.status().ToString();
  std::string expected = std::string(first.data(), piece) + std::string(second.data(), piece);
  expected.resize(size);
  EXPECT_EQ(*data, expected);
}

TEST_P(PosixDirectTest, ReserveThenWriteReadsBackEqual) {
  Storage* storage = DefaultStorage();
  const std::string path = dir_ + "/data";
  Result<std::unique_ptr<WritableFile>> f = storage->NewWritableFile(path, {.direct = true});
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  const size_t piece = 2 * kDirectIoAlignment;
  ASSERT_TRUE((*f)->Reserve(2 * piece).ok());
  AlignedBuffer first = Pattern(piece, 3);
  AlignedBuffer second = Pattern(piece, 4);
  ASSERT_TRUE((*f)->WriteAt(0, first.data(), piece).ok());
  ASSERT_TRUE((*f)->WriteAt(piece, second.data(), piece).ok());
  ASSERT_TRUE((*f)->Truncate(2 * piece - 7).ok());
  ASSERT_TRUE((*f)->Sync().ok());
  ASSERT_TRUE((*f)->Close().ok());
  Result<std::string> data = storage->ReadFileToString(path);
  ASSERT_TRUE(data.ok()) << data.status().ToString();
  std::string expected = std::string(first.data(), piece) + std::string(second.data(), piece);
  expected.resize(2 * piece - 7);
  EXPECT_EQ(*data, expected);
}

TEST_P(PosixDirectTest, ReserveMoreThanTheDiskFailsNamingTheFile) {
  const std::string path = dir_ + "/data";
  Result<std::unique_ptr<WritableFile>> f = DefaultStorage()->NewWritableFile(path, {});
  ASSERT_TRUE(f.ok());
  Status s = (*f)->Reserve(uint64_t{1} << 60);  // 1 EiB: no disk here has it
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("reserve 1152921504606846976 bytes for " + path), std::string::npos)
      << s.message();
}

// On a disk filesystem Reserve allocates the blocks; on tmpfs it would only
// zero pages up front that the writes fill anyway, so it allocates nothing.
TEST_P(PosixDirectTest, ReserveAllocatesOnDisksButNotOnTmpfs) {
  const std::string path = dir_ + "/data";
  Result<std::unique_ptr<WritableFile>> f = DefaultStorage()->NewWritableFile(path, {});
  ASSERT_TRUE(f.ok());
  ASSERT_TRUE((*f)->Reserve(8 << 20).ok());
  struct statfs fs;
  struct stat st;
  ASSERT_EQ(statfs(dir_.c_str(), &fs), 0);
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  if (fs.f_type == TMPFS_MAGIC) {
    EXPECT_EQ(st.st_blocks, 0);
  } else if (fs.f_type == EXT4_SUPER_MAGIC || fs.f_type == XFS_SUPER_MAGIC) {
    EXPECT_GE(st.st_blocks * 512, 8 << 20);
  }
}

TEST_P(PosixDirectTest, MisalignedDirectWriteIsInvalidArgument) {
  Result<std::unique_ptr<WritableFile>> f =
      DefaultStorage()->NewWritableFile(dir_ + "/data", {.direct = true});
  ASSERT_TRUE(f.ok());
  if (!(*f)->direct()) GTEST_SKIP() << "filesystem refused O_DIRECT; buffered fallback in use";
  AlignedBuffer buffer = Pattern(kDirectIoAlignment, 0);
  Status s = (*f)->WriteAt(100, buffer.data(), buffer.size());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find(dir_ + "/data"), std::string::npos) << s.message();
  EXPECT_EQ((*f)->WriteAt(0, buffer.data() + 1, 512).code(), StatusCode::kInvalidArgument);
}

TEST_P(PosixDirectTest, BufferedFallbackAcceptsAnything) {
  Result<std::unique_ptr<WritableFile>> f =
      DefaultStorage()->NewWritableFile(dir_ + "/data", {.direct = false});
  ASSERT_TRUE(f.ok());
  EXPECT_FALSE((*f)->direct());
  EXPECT_TRUE((*f)->WriteAt(3, "abc", 3).ok());
}

// Direct reads of every kind of range give the bytes a buffered read gives:
// aligned ranges into aligned memory, unaligned heads and tails, memory
// aligned unlike the offset, ranges larger than the bounce buffer, the file's
// unaligned end; past the end is DataLoss naming the file. Where the
// filesystem refuses O_DIRECT the file falls back to buffered reads.
TEST_P(PosixDirectTest, DirectReadsEqualBufferedOnes) {
  Storage* storage = DefaultStorage();
  const std::string path = dir_ + "/data";
  const size_t size = (3 << 20) + 12345;  // beyond the 1 MiB bounce buffer, unaligned end
  AlignedBuffer pattern = Pattern(size, 7);
  ASSERT_TRUE(storage->WriteStringToFile(path, std::string(pattern.data(), size)).ok());
  Result<std::unique_ptr<ReadableFile>> f = storage->NewDirectReadableFile(path);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  RecordProperty("direct", (*f)->direct() ? "true" : "false");
  struct statfs fs;
  ASSERT_EQ(statfs(dir_.c_str(), &fs), 0);
  if (fs.f_type == EXT4_SUPER_MAGIC || fs.f_type == XFS_SUPER_MAGIC) {
    EXPECT_TRUE((*f)->direct());
  }
  EXPECT_FALSE((*DefaultStorage()->NewReadableFile(path))->direct());
  const size_t a = kDirectIoAlignment;
  struct Case {
    uint64_t offset;
    size_t n;
    size_t mem_shift;  // dst = an aligned buffer + this
  };
  const Case cases[] = {
      {0, 2 * a, 0},                // aligned everything: straight into dst
      {a, (2 << 20) + 3 * a, 0},    // aligned, longer than the bounce buffer
      {100, 3 * a, 100},            // unaligned head and tail, dst aligned alike
      {100, 3 * a, 0},              // dst aligned unlike the offset: all bounced
      {5, 7, 5},                    // inside one page
      {a - 1, 2, a - 1},            // across a page boundary
      {777, (2 << 20) + 999, 777},  // long, unaligned both ends
      {size - 5000, 5000, 0},       // the file's unaligned end
      {size - 100, 100, (size - 100) % a},
      {0, size, 0},  // the whole file
      {12, 0, 0},    // nothing
  };
  for (const Case& c : cases) {
    AlignedBuffer mem(c.n + c.mem_shift + 1);
    std::memset(mem.data(), 0x5a, mem.size());
    Status s = (*f)->ReadAt(c.offset, c.n, mem.data() + c.mem_shift);
    ASSERT_TRUE(s.ok()) << c.offset << "+" << c.n << ": " << s.ToString();
    EXPECT_EQ(std::memcmp(mem.data() + c.mem_shift, pattern.data() + c.offset, c.n), 0)
        << "bytes [" << c.offset << ", " << c.offset + c.n << ") differ";
    EXPECT_EQ(mem.data()[c.mem_shift + c.n], 0x5a) << "wrote past the end at " << c.offset;
  }
  AlignedBuffer mem(2 * a);
  Status s = (*f)->ReadAt(size - 10, 20, mem.data());
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.ToString();
  EXPECT_NE(s.message().find(path), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("short read"), std::string::npos) << s.message();
}

INSTANTIATE_TEST_SUITE_P(Dirs, PosixDirectTest, ::testing::Values("/tmp", "/dev/shm", "."),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           if (info.param == "/tmp") return "Tmp";
                           return info.param == "." ? "CurrentDir" : "DevShm";
                         });

}  // namespace
}  // namespace shardpoint
