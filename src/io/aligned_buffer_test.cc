#include "src/io/aligned_buffer.h"

#include <cstdint>
#include <utility>

#include "gtest/gtest.h"

namespace shardpoint::internal_io {
namespace {

TEST(AlignedBufferTest, SizeIsRoundedUpAndDataAligned) {
  AlignedBuffer buffer(5000);
  EXPECT_EQ(buffer.size(), 2 * kDirectIoAlignment);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(buffer.data()) % kDirectIoAlignment, 0u);
  buffer.data()[buffer.size() - 1] = 'x';  // the whole rounded size is usable

  AlignedBuffer small(1, 64);
  EXPECT_EQ(small.size(), 64u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(small.data()) % 64, 0u);
}

TEST(AlignedBufferTest, ZeroSizeHoldsNothing) {
  AlignedBuffer empty(0);
  EXPECT_EQ(empty.size(), 0u);
  EXPECT_EQ(empty.data(), nullptr);
  AlignedBuffer defaulted;
  EXPECT_EQ(defaulted.size(), 0u);
}

TEST(AlignedBufferTest, MoveTransfersOwnership) {
  AlignedBuffer a(4096);
  char* data = a.data();
  AlignedBuffer b(std::move(a));
  EXPECT_EQ(b.data(), data);
  EXPECT_EQ(a.data(), nullptr);  // NOLINT: testing the moved-from state
  EXPECT_EQ(a.size(), 0u);
  AlignedBuffer c(8192);
  c = std::move(b);
  EXPECT_EQ(c.data(), data);
  EXPECT_EQ(c.size(), 4096u);
}

}  // namespace
}  // namespace shardpoint::internal_io
