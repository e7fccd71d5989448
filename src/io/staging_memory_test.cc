#include "src/io/staging_memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace shardpoint::internal_io {
namespace {

// How many of the pages of `m` are resident (mincore).
size_t ResidentPages(StagingMemory& m) {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> v(m.size() / page);
  EXPECT_EQ(::mincore(m.data(), m.size(), v.data()), 0);
  size_t n = 0;
  for (unsigned char c : v) n += c & 1;
  return n;
}

TEST(StagingMemoryTest, RoundedToHugePagesAlignedAndZero) {
  Result<StagingMemory> m = StagingMemory::Map(5000, true, false);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->size(), kHugePageSize);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(m->data()) % kHugePageSize, 0u);
  EXPECT_EQ(m->data()[0], 0);
  m->data()[m->size() - 1] = 'x';  // the whole rounded size is usable
  Result<StagingMemory> empty = StagingMemory::Map(0, true, true);
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->data(), nullptr);
  EXPECT_EQ(empty->size(), 0u);
}

TEST(StagingMemoryTest, PrefaultMakesEveryPageResident) {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  Result<StagingMemory> cold = StagingMemory::Map(3 * kHugePageSize, false, false);
  ASSERT_TRUE(cold.ok());
  EXPECT_EQ(ResidentPages(*cold), 0u);
  for (bool huge : {false, true}) {
    Result<StagingMemory> warm = StagingMemory::Map(3 * kHugePageSize, huge, true);
    ASSERT_TRUE(warm.ok());
    EXPECT_EQ(ResidentPages(*warm), 3 * kHugePageSize / page) << "huge " << huge;
    for (size_t i = 0; i < warm->size(); i += 4096) ASSERT_EQ(warm->data()[i], 0);
  }
}

TEST(StagingMemoryTest, HugePagesOnlyWhenAskedAndWhereTheKernelHasThem) {
  Result<StagingMemory> plain = StagingMemory::Map(kHugePageSize, false, false);
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(plain->huge_pages());
  Result<StagingMemory> huge = StagingMemory::Map(kHugePageSize, true, false);
  ASSERT_TRUE(huge.ok());
  const bool kernel_has_thp = ::access("/sys/kernel/mm/transparent_hugepage/enabled", F_OK) == 0;
  EXPECT_EQ(huge->huge_pages(), kernel_has_thp);
}

// A mapping the kernel refuses is an IOError with the system's reason.
TEST(StagingMemoryTest, RefusedMappingIsAnIOErrorNamingItsSize) {
  Result<StagingMemory> m = StagingMemory::Map(size_t{1} << 62, false, false);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kIOError);
  EXPECT_EQ(m.status().message().rfind("staging memory: mmap of ", 0), 0u) << m.status().message();
  EXPECT_NE(m.status().message().find(" bytes failed: Cannot allocate memory"), std::string::npos)
      << m.status().message();
}

TEST(StagingMemoryTest, MoveTransfersTheMapping) {
  Result<StagingMemory> m = StagingMemory::Map(kHugePageSize, true, true);
  ASSERT_TRUE(m.ok());
  char* p = m->data();
  StagingMemory a = std::move(*m);
  EXPECT_EQ(a.data(), p);
  EXPECT_EQ(m->data(), nullptr);
  StagingMemory b;
  b = std::move(a);
  EXPECT_EQ(b.data(), p);
  EXPECT_EQ(b.size(), kHugePageSize);
}

}  // namespace
}  // namespace shardpoint::internal_io
