#include "src/io/raw_buffer.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <utility>

namespace shardpoint::internal_io {
namespace {

TEST(RawBuffer, KeepsItsMemoryAndBytesWhileItFits) {
  RawBuffer b;
  EXPECT_EQ(b.size(), 0u);
  char* p = b.Resize(1000);
  ASSERT_NE(p, nullptr);
  std::memset(p, 'x', 1000);
  // Shrinking and growing back within the capacity: same memory, bytes kept
  // (no zero-fill of the regrown part).
  EXPECT_EQ(b.Resize(10), p);
  EXPECT_EQ(b.size(), 10u);
  EXPECT_EQ(b.Resize(1000), p);
  EXPECT_EQ(b.capacity(), 1000u);
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(p[i], 'x') << i;
  // Past the capacity: new memory of the new size.
  char* q = b.Resize(5000);
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(b.size(), 5000u);
  EXPECT_GE(b.capacity(), 5000u);
  std::memset(q, 'y', 5000);  // all of it writable (ASan checks)
}

TEST(RawBuffer, LargeBuffersAreWholeAlignedHugePages) {
  constexpr size_t kHuge = size_t{2} << 20;
  RawBuffer b;
  char* p = b.Resize(kHuge + 1);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % kHuge, 0u);
  EXPECT_EQ(b.capacity(), 2 * kHuge);
  EXPECT_EQ(b.size(), kHuge + 1);
  std::memset(p, 1, b.capacity());
  EXPECT_EQ(b.Resize(2 * kHuge), p);
  RawBuffer moved = std::move(b);
  EXPECT_EQ(moved.data(), p);
  // The moved-from buffer is empty and usable.
  EXPECT_EQ(b.capacity(), 0u);  // NOLINT(bugprone-use-after-move)
  std::memset(b.Resize(100), 2, 100);
}

TEST(RawBuffer, TheShelfKeepsTouchedBuffersForTheNextTaker) {
  // The shelf is the process's: other buffers may be on it too.
  RawBuffer b;
  char* p = b.Resize(size_t{2} << 20);
  std::memset(p, 7, b.size());
  Shelve(std::move(b));
  RawBuffer big;
  char* q = big.Resize(kMaxShelvedBytes + 1);  // too large to keep
  Shelve(std::move(big));
  bool found = false;
  for (RawBuffer t = TakeShelved(); t.capacity() > 0; t = TakeShelved()) {
    EXPECT_NE(t.data(), q);
    if (t.data() != p) continue;
    found = true;
    EXPECT_EQ(t.capacity(), size_t{2} << 20);
    EXPECT_EQ(t.data()[12345], 7);  // its bytes as left: no zero-fill
  }
  EXPECT_TRUE(found);
  EXPECT_EQ(TakeShelved().capacity(), 0u);
}

}  // namespace
}  // namespace shardpoint::internal_io
