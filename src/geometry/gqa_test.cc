#include "src/geometry/gqa.h"

#include <gtest/gtest.h>

#include <vector>

namespace shardpoint::internal_geometry {
namespace {

// 4 query heads in 2 groups, head_dim 3: fused rows q0 q1 k0 v0 q2 q3 k1 v1.
TEST(GqaTest, RunsOfEachGroupInFusedOrder) {
  auto g0 = GqaGroupRuns(4, 2, 3, 0);
  auto g1 = GqaGroupRuns(4, 2, 3, 1);
  auto same = [](const GqaRun& r, int part, int64_t src, int64_t dst, int64_t rows) {
    return r.part == part && r.src_row == src && r.dst_row == dst && r.rows == rows;
  };
  EXPECT_TRUE(same(g0[0], 0, 0, 0, 6));
  EXPECT_TRUE(same(g0[1], 1, 0, 6, 3));
  EXPECT_TRUE(same(g0[2], 2, 0, 9, 3));
  EXPECT_TRUE(same(g1[0], 0, 6, 12, 6));
  EXPECT_TRUE(same(g1[1], 1, 3, 18, 3));
  EXPECT_TRUE(same(g1[2], 2, 3, 21, 3));
  EXPECT_EQ(GqaPartRows(4, 2, 3), (std::array<int64_t, 3>{12, 6, 6}));
}

// For several shapes, the runs tile the fused rows and each part's rows
// exactly once, in order.
TEST(GqaTest, RunsTileFusedAndParts) {
  for (int64_t groups : {1, 2, 4, 8}) {
    for (int64_t per_group : {1, 2, 7}) {
      for (int64_t d : {1, 16}) {
        const int64_t heads = groups * per_group;
        std::array<int64_t, 3> part_rows = GqaPartRows(heads, groups, d);
        std::vector<int> fused((heads + 2 * groups) * d, 0);
        std::array<std::vector<int>, 3> parts;
        for (int p = 0; p < 3; ++p) parts[p].assign(part_rows[p], 0);
        int64_t next_dst = 0;
        std::array<int64_t, 3> next_src = {0, 0, 0};
        for (int64_t g = 0; g < groups; ++g) {
          for (const GqaRun& r : GqaGroupRuns(heads, groups, d, g)) {
            ASSERT_EQ(r.dst_row, next_dst);
            ASSERT_EQ(r.src_row, next_src[r.part]);
            next_dst += r.rows, next_src[r.part] += r.rows;
            for (int64_t i = 0; i < r.rows; ++i)
              ++fused[r.dst_row + i], ++parts[r.part][r.src_row + i];
          }
        }
        EXPECT_EQ(next_dst, static_cast<int64_t>(fused.size()));
        for (int v : fused) ASSERT_EQ(v, 1);
        for (int p = 0; p < 3; ++p) {
          EXPECT_EQ(next_src[p], part_rows[p]);
          for (int v : parts[p]) ASSERT_EQ(v, 1);
        }
      }
    }
  }
}

}  // namespace
}  // namespace shardpoint::internal_geometry
