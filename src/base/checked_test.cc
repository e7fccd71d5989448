#include "src/base/checked.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>

namespace shardpoint::internal_base {
namespace {

TEST(CheckedTest, AddInRangeAndAtTheEdges) {
  EXPECT_EQ(CheckedAdd<int64_t>(2, 3), 5);
  EXPECT_EQ(CheckedAdd<int64_t>(INT64_MAX - 1, 1), INT64_MAX);
  EXPECT_EQ(CheckedAdd<int64_t>(INT64_MAX, 1), std::nullopt);
  EXPECT_EQ(CheckedAdd<int64_t>(INT64_MIN, -1), std::nullopt);
  EXPECT_EQ(CheckedAdd<uint64_t>(UINT64_MAX, 0), UINT64_MAX);
  EXPECT_EQ(CheckedAdd<uint64_t>(UINT64_MAX, 1), std::nullopt);
}

TEST(CheckedTest, MulInRangeAndAtTheEdges) {
  EXPECT_EQ(CheckedMul<int64_t>(-4, 5), -20);
  EXPECT_EQ(CheckedMul<int64_t>(int64_t{1} << 31, int64_t{1} << 31), int64_t{1} << 62);
  EXPECT_EQ(CheckedMul<int64_t>(int64_t{1} << 32, int64_t{1} << 31), std::nullopt);
  EXPECT_EQ(CheckedMul<int64_t>(INT64_MIN, -1), std::nullopt);
  EXPECT_EQ(CheckedMul<uint64_t>(uint64_t{1} << 63, 2), std::nullopt);
  EXPECT_EQ(CheckedMul<uint64_t>(0, UINT64_MAX), 0u);
}

}  // namespace
}  // namespace shardpoint::internal_base
