// DTensor placements: local shape and global offset as PyTorch computes them
// (torch/distributed/tensor/_utils.py, compute_local_shape_and_global_offset,
// and placement_types.py, Shard / _StridedShard._split_tensor), uneven
// torch.chunk sizes, empty shards, and FSDP2 x TP.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "shardpoint/layout.h"
#include "shardpoint/layout_dtensor.h"
#include "shardpoint/layout_fused.h"
#include "shardpoint/layout_megatron.h"
#include "tests/testing/ranks.h"
#include "tests/testing/reference.h"

namespace shardpoint {
namespace {

using ::testing::HasSubstr;
using P = Placement;

// --- An independent model of PyTorch: index lists, split as _split_tensor does.

using Indices = std::vector<int64_t>;

// torch.chunk(x, m), padded with empty pieces to m.
std::vector<Indices> TorchChunk(const Indices& x, int64_t m) {
  const int64_t n = static_cast<int64_t>(x.size()), c = (n + m - 1) / m;
  std::vector<Indices> out(m);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = i * c; j < std::min(n, (i + 1) * c); ++j) out[i].push_back(x[j]);
  }
  return out;
}

// The global indices of dim `d` this coordinate holds, in local order.
Indices SimulatedIndices(int64_t n, int d, const DeviceMesh& mesh,
                         const std::vector<Placement>& placements) {
  Indices cur(n);
  std::iota(cur.begin(), cur.end(), 0);
  for (size_t i = 0; i < placements.size(); ++i) {
    const Placement& p = placements[i];
    if (p.kind == P::Kind::kReplicate || p.dim != d) continue;
    const int64_t m = mesh.shape[i], c = mesh.coordinate[i];
    if (p.kind == P::Kind::kShard) {
      cur = TorchChunk(cur, m)[c];
    } else {
      Indices next;
      for (const Indices& piece : TorchChunk(cur, p.split_factor)) {
        const Indices mine = TorchChunk(piece, m)[c];
        next.insert(next.end(), mine.begin(), mine.end());
      }
      cur = next;
    }
  }
  return cur;
}

// The global indices the boxes of a 1-d tensor cover, in local order.
Indices Covered(const std::vector<Box>& boxes) {
  Indices out;
  for (const Box& b : boxes) {
    for (int64_t i = 0; i < b.shape[0]; ++i) out.push_back(b.offset[0] + i);
  }
  return out;
}

// PyTorch's (local_shape, global_offset) for a 1-d tensor from our boxes.
std::pair<int64_t, int64_t> ShapeAndOffset(const std::vector<Box>& boxes) {
  int64_t size = 0;
  for (const Box& b : boxes) size += b.shape[0];
  return {size, boxes.at(0).offset[0]};
}

std::vector<Box> Boxes(const Shape& shape, const DeviceMesh& mesh,
                       const std::vector<Placement>& placements) {
  Result<std::vector<Box>> b = DTensorLocalBoxes(shape, mesh, placements);
  EXPECT_TRUE(b.ok()) << b.status().ToString();
  return b.ok() ? *b : std::vector<Box>{};
}

// FSDP2 over TP as PyTorch describes it: mesh (dp, tp), column-parallel.
std::vector<Placement> Fsdp2Tp(int tp) { return {P::StridedShard(0, tp), P::Shard(0)}; }

TEST(DTensorTest, PlacementNames) {
  EXPECT_EQ(P::Replicate().ToString(), "Replicate()");
  EXPECT_EQ(P::Shard(1).ToString(), "Shard(1)");
  EXPECT_EQ(P::StridedShard(0, 2).ToString(), "StridedShard(0, 2)");
}

TEST(DTensorTest, ShardFollowsTorchChunkWithEmptyShardsAtTheEnd) {
  // torch.chunk(5, 4) = [2, 2, 1] and one empty shard, reported (like
  // PyTorch) at global offset 5 = global_shape[0].
  const std::vector<std::pair<int64_t, int64_t>> want = {{0, 2}, {2, 2}, {4, 1}, {5, 0}};
  for (int c = 0; c < 4; ++c) {
    EXPECT_EQ(Boxes({5, 3}, {{4}, {c}}, {P::Shard(0)}),
              std::vector<Box>{Box({want[c].first, 0}, {want[c].second, 3})})
        << "coordinate " << c;
  }
  // 6 over 4: torch.chunk gives 3 pieces of 2; the 4th rank is empty.
  EXPECT_EQ(Boxes({6}, {{4}, {3}}, {P::Shard(0)}), std::vector<Box>{Box({6}, {0})});
  EXPECT_EQ(Boxes({6}, {{4}, {2}}, {P::Shard(0)}), std::vector<Box>{Box({4}, {2})});
  // Replicate changes nothing; a 0-d tensor is replicated whole.
  EXPECT_EQ(Boxes({6}, {{4}, {2}}, {P::Replicate()}), std::vector<Box>{Box({0}, {6})});
  EXPECT_EQ(Boxes({}, {{2}, {1}}, {P::Replicate()}), std::vector<Box>{Box({}, {})});
}

// The table in the docstring of compute_local_shape_and_global_offset:
// [2, 5] on mesh (2, 2) with (Shard(1), Shard(1)).
TEST(DTensorTest, PyTorchDocstringExampleShardShard) {
  const std::vector<std::pair<int64_t, int64_t>> want = {{2, 0}, {1, 2}, {1, 3}, {1, 4}};
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(Boxes({2, 5}, {{2, 2}, {r / 2, r % 2}}, {P::Shard(1), P::Shard(1)}),
              std::vector<Box>{Box({0, want[r].second}, {2, want[r].first})})
        << "rank " << r;
  }
}

// The table in the docstring of _StridedShard: [8, 8] on mesh (dp=2, tp=2)
// with (_StridedShard(0, split_factor=2), Shard(0)) is FSDP2 over TP: rank
// (dp, tp) holds rows 2 * (2 * tp + dp) .. +2.
TEST(DTensorTest, PyTorchDocstringExampleStridedShard) {
  for (int dp = 0; dp < 2; ++dp) {
    for (int tp = 0; tp < 2; ++tp) {
      EXPECT_EQ(Boxes({8, 8}, {{2, 2}, {dp, tp}}, Fsdp2Tp(2)),
                std::vector<Box>{Box({2 * (2 * tp + dp), 0}, {2, 8})});
    }
  }
}

// The comment in _compute_local_shape_and_global_offset: [0..7] with
// (Shard(0), _StridedShard(0, split_factor=2)) on mesh (2, 2) holds two
// separate runs: [0, 2], [1, 3], [4, 6], [5, 7].
TEST(DTensorTest, StridedShardAfterShardHoldsSeveralRuns) {
  const std::vector<Indices> want = {{0, 2}, {1, 3}, {4, 6}, {5, 7}};
  for (int r = 0; r < 4; ++r) {
    const DeviceMesh mesh{{2, 2}, {r / 2, r % 2}};
    const std::vector<Placement> pl = {P::Shard(0), P::StridedShard(0, 2)};
    std::vector<Box> boxes = Boxes({8}, mesh, pl);
    EXPECT_EQ(boxes.size(), 2u);
    EXPECT_EQ(Covered(boxes), want[r]) << "rank " << r;
    // The local tensor places the runs one after the other.
    Result<LocalTensor> t = DTensorShard("x", DType::kF32, nullptr, {8, 3}, mesh, pl);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    EXPECT_EQ(t->shape, (Shape{2, 3}));
    ASSERT_EQ(t->segments.size(), 2u);
    EXPECT_EQ(t->segments[0].global_box, Box({want[r][0], 0}, {1, 3}));
    EXPECT_EQ(t->segments[0].local_offset, (Shape{0, 0}));
    EXPECT_EQ(t->segments[1].global_box, Box({want[r][1], 0}, {1, 3}));
    EXPECT_EQ(t->segments[1].local_offset, (Shape{1, 0}));
  }
}

// Regression: FSDP2 x TP2 of a 6-row tensor. TP splits rows 3 + 3, FSDP2
// splits each TP shard 2 + 1. Older PyTorch releases computed the strided
// offset as local_shape * shard_index (shard_index = dp + 2 * tp), giving
// (dp 0, tp 1) offset 4, (1, 0) offset 1 and (1, 1) offset 3: overlapping
// DCP chunks and lost rows. Hand-checked expected boxes:
//   (dp, tp)   TP shard   FSDP2 piece   rows
//   (0, 0)     0..2       first 2       [0:2]
//   (1, 0)     0..2       last 1        [2:3]
//   (0, 1)     3..5       first 2       [3:5]
//   (1, 1)     3..5       last 1        [5:6]
TEST(DTensorTest, RegressionFsdp2Tp2SixRows) {
  const int64_t want[2][2][2] = {{{0, 2}, {3, 2}}, {{2, 1}, {5, 1}}};  // [dp][tp] = {offset, size}
  for (int dp = 0; dp < 2; ++dp) {
    for (int tp = 0; tp < 2; ++tp) {
      const Box expect({want[dp][tp][0], 0}, {want[dp][tp][1], 4});
      EXPECT_EQ(Boxes({6, 4}, {{2, 2}, {dp, tp}}, Fsdp2Tp(2)), std::vector<Box>{expect})
          << "dp " << dp << " tp " << tp;
      // The data FSDP2 really holds: its chunk of the TP shard.
      Result<LocalTensor> tp_shard = ColumnParallel("w", DType::kF32, nullptr, {6, 4}, tp, 2);
      ASSERT_TRUE(tp_shard.ok());
      Result<LocalTensor> fsdp = ShardLocal(*tp_shard, 0, dp, 2, nullptr);
      ASSERT_TRUE(fsdp.ok()) << fsdp.status().ToString();
      EXPECT_EQ(fsdp->segments.at(0).global_box, expect);
      EXPECT_EQ(fsdp->shape, expect.shape);
    }
  }
}

// 5 rows: TP 3 + 2, FSDP2 2 + 1 and 1 + 1.
TEST(DTensorTest, RegressionFsdp2Tp2FiveRows) {
  const int64_t want[2][2][2] = {{{0, 2}, {3, 1}}, {{2, 1}, {4, 1}}};
  for (int dp = 0; dp < 2; ++dp) {
    for (int tp = 0; tp < 2; ++tp) {
      EXPECT_EQ(Boxes({5}, {{2, 2}, {dp, tp}}, Fsdp2Tp(2)),
                std::vector<Box>{Box({want[dp][tp][0]}, {want[dp][tp][1]})})
          << "dp " << dp << " tp " << tp;
    }
  }
}

// 3 rows over FSDP4 x TP2: TP 2 + 1; FSDP2 gives TP rank 0's rows to dp 0
// and 1 and TP rank 1's single row to dp 0; the other five ranks are empty
// (offset 3 = the global size, as PyTorch reports empty shards).
TEST(DTensorTest, RegressionFsdp4Tp2ThreeRowsHasEmptyShards) {
  std::map<std::pair<int, int>, Box> want;
  for (int dp = 0; dp < 4; ++dp) {
    for (int tp = 0; tp < 2; ++tp) want[{dp, tp}] = Box({3}, {0});
  }
  want[{0, 0}] = Box({0}, {1});
  want[{1, 0}] = Box({1}, {1});
  want[{0, 1}] = Box({2}, {1});
  for (const auto& [coord, box] : want) {
    EXPECT_EQ(Boxes({3}, {{4, 2}, {coord.first, coord.second}}, Fsdp2Tp(2)), std::vector<Box>{box})
        << "dp " << coord.first << " tp " << coord.second;
  }
}

// Our run arithmetic equals a literal replay of PyTorch's index splitting
// for every small size and mesh, for the FSDP2 x TP placements and others;
// the shards of every rank tile the tensor exactly once.
TEST(DTensorTest, MatchesPyTorchIndexSplittingExhaustively) {
  const std::vector<std::vector<Placement>> patterns = {
      {P::Shard(0), P::Shard(0)},           {P::StridedShard(0, 2), P::Shard(0)},
      {P::StridedShard(0, 3), P::Shard(0)}, {P::Shard(0), P::StridedShard(0, 2)},
      {P::Replicate(), P::Shard(0)},        {P::Shard(0), P::Replicate()}};
  int cases = 0;
  for (const auto& pl : patterns) {
    for (int64_t a = 1; a <= 4; ++a) {
      for (int64_t b = 1; b <= 4; ++b) {
        for (int64_t n = 0; n <= 13; ++n) {
          std::multiset<int64_t> all;
          for (int64_t i = 0; i < a; ++i) {
            for (int64_t j = 0; j < b; ++j) {
              const DeviceMesh mesh{{a, b}, {i, j}};
              std::vector<Box> boxes = Boxes({n}, mesh, pl);
              const Indices want = SimulatedIndices(n, 0, mesh, pl);
              ASSERT_EQ(Covered(boxes), want)
                  << "n " << n << " mesh " << a << "x" << b << " at " << i << "," << j << " "
                  << pl[0].ToString() << " " << pl[1].ToString();
              auto [size, offset] = ShapeAndOffset(boxes);
              EXPECT_EQ(size, static_cast<int64_t>(want.size()));
              EXPECT_EQ(offset, want.empty() ? n : want[0]);
              const bool replicated =
                  pl[0].kind == P::Kind::kReplicate || pl[1].kind == P::Kind::kReplicate;
              if (!replicated || (pl[0].kind == P::Kind::kReplicate ? i : j) == 0) {
                all.insert(want.begin(), want.end());
              }
              ++cases;
            }
          }
          Indices expect(n);
          std::iota(expect.begin(), expect.end(), 0);
          EXPECT_EQ(Indices(all.begin(), all.end()), expect) << "n " << n;
        }
      }
    }
  }
  EXPECT_GT(cases, 5000);
}

// PyTorch's placements for FSDP2 x TP, (_StridedShard(0, tp), Shard(0)),
// describe the data FSDP2 holds (torch.chunk of the TP shard) whenever the
// sizes are even and in most uneven cases, but not all: 7 rows over FSDP3 x
// TP2 put row 6 on (dp 2, tp 0) by the placements, while FSDP2 holds it on
// (dp 2, tp 1) (TP rank 0's 4 rows split 2 + 2 + 0 over dp). Enumerating
// rows <= 16 and dp, tp <= 4, the sizes that differ are (rows, dp, tp) =
// (7, 3, 2), (9, 4, 2), (11, 3, 3), (13, 3, 2), (14, 4, 3), (15, 3, 4),
// (16, 4, 3). For FSDP2 parameters use ShardLocal of the TP layout, which
// records the real data.
TEST(DTensorTest, StridedPlacementsAndFsdp2DataDifferWhenUneven) {
  auto fsdp2 = [](int64_t n, int dp, int dp_size, int tp, int tp_size) {
    Result<LocalTensor> t = ColumnParallel("w", DType::kF32, nullptr, {n}, tp, tp_size);
    EXPECT_TRUE(t.ok());
    Result<LocalTensor> s = ShardLocal(*t, 0, dp, dp_size, nullptr);
    EXPECT_TRUE(s.ok());
    return s->segments.at(0).global_box;
  };
  EXPECT_EQ(Boxes({7}, {{3, 2}, {2, 0}}, Fsdp2Tp(2)), std::vector<Box>{Box({6}, {1})});
  EXPECT_EQ(Boxes({7}, {{3, 2}, {2, 1}}, Fsdp2Tp(2)), std::vector<Box>{Box({7}, {0})});
  EXPECT_EQ(fsdp2(7, 2, 3, 0, 2).shape, (Shape{0}));
  EXPECT_EQ(fsdp2(7, 2, 3, 1, 2), Box({6}, {1}));
  // Every even case, and the listed uneven ones, agree.
  for (int64_t n : {0, 2, 3, 5, 6, 8, 12, 16}) {
    for (int dp_size : {1, 2, 4}) {
      for (int tp_size : {1, 2}) {
        for (int dp = 0; dp < dp_size; ++dp) {
          for (int tp = 0; tp < tp_size; ++tp) {
            std::vector<Box> b = Boxes({n}, {{dp_size, tp_size}, {dp, tp}}, Fsdp2Tp(tp_size));
            ASSERT_EQ(b.size(), 1u);
            const Box want = fsdp2(n, dp, dp_size, tp, tp_size);
            EXPECT_EQ(b[0].shape, want.shape) << n << " " << dp << "/" << dp_size << " " << tp;
            if (!want.empty()) {
              EXPECT_EQ(b[0], want) << n << " " << dp << " " << tp;
            }
          }
        }
      }
    }
  }
}

TEST(DTensorTest, TwoDimsRowParallelUnderFsdp2) {
  // Row-parallel weight [6, 5]: FSDP2 on dim 0, TP on dim 1 (no striding).
  const DeviceMesh mesh{{2, 2}, {1, 1}};
  Result<LocalTensor> t =
      DTensorShard("w", DType::kBF16, nullptr, {6, 5}, mesh, {P::Shard(0), P::Shard(1)});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->shape, (Shape{3, 2}));
  ASSERT_EQ(t->segments.size(), 1u);
  EXPECT_EQ(t->segments[0].global_box, Box({3, 3}, {3, 2}));
  EXPECT_EQ(t->segments[0].global_shape, (Shape{6, 5}));
}

TEST(DTensorTest, BadMeshesNameThePlacement) {
  auto err = [](const Shape& shape, const DeviceMesh& mesh, const std::vector<Placement>& pl) {
    Result<LocalTensor> t = DTensorShard("w", DType::kF32, nullptr, shape, mesh, pl);
    EXPECT_FALSE(t.ok());
    EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
    return t.status().message();
  };
  EXPECT_THAT(err({4}, {{2}, {0}}, {P::Shard(0), P::Shard(0)}), HasSubstr("lengths differ"));
  EXPECT_THAT(err({4}, {{2}, {2}}, {P::Shard(0)}), HasSubstr("mesh dim 0 (Shard(0))"));
  EXPECT_THAT(err({4}, {{2}, {-1}}, {P::Shard(0)}), HasSubstr("coordinate -1"));
  EXPECT_THAT(err({4}, {{0}, {0}}, {P::Shard(0)}), HasSubstr("mesh dim of size 0"));
  EXPECT_THAT(err({4}, {{2}, {0}}, {P::Shard(1)}), HasSubstr("outside shape [4]"));
  EXPECT_THAT(err({4}, {{2}, {0}}, {P::StridedShard(0, 0)}), HasSubstr("split factor"));
  EXPECT_THAT(err({4}, {{2}, {0}}, {P::Shard(3)}), HasSubstr("'w'"));
  EXPECT_THAT(err({-1}, {{2}, {0}}, {P::Replicate()}), HasSubstr("'w'"));
}

TEST(ShardLocalTest, CutsAFusedWeightInsideWInsideVAndOnTheBorder) {
  // SwiGLU fc1 on TP rank 1 of 2, F = 6: local [W rows 3..5; V rows 3..5].
  Result<LocalTensor> fc1 = SwiGluFc1("w", "v", DType::kF32, nullptr, 6, {4}, 1, 2);
  ASSERT_TRUE(fc1.ok()) << fc1.status().ToString();
  ASSERT_EQ(fc1->shape, (Shape{6, 4}));
  auto boxes = [&](int index, int count) {
    Result<LocalTensor> t = ShardLocal(*fc1, 0, index, count, nullptr);
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    std::vector<std::string> out;
    for (const Segment& s : t->segments) out.push_back(s.key + s.global_box.ToString());
    return out;
  };
  using KB = std::vector<std::string>;
  // Over 2: the border (W's 3 rows | V's 3 rows); V is an empty declaration.
  EXPECT_EQ(boxes(0, 2), (KB{"w[3:6, 0:4]", "v[3:3, 0:4]"}));
  EXPECT_EQ(boxes(1, 2), (KB{"w[6:6, 0:4]", "v[3:6, 0:4]"}));
  // Over 4 (2, 2, 2, 0 rows): inside W, W/V, inside V, nothing.
  EXPECT_EQ(boxes(0, 4), (KB{"w[3:5, 0:4]", "v[3:3, 0:4]"}));
  EXPECT_EQ(boxes(1, 4), (KB{"w[5:6, 0:4]", "v[3:4, 0:4]"}));
  EXPECT_EQ(boxes(2, 4), (KB{"w[6:6, 0:4]", "v[4:6, 0:4]"}));
  Result<LocalTensor> last = ShardLocal(*fc1, 0, 3, 4, nullptr);
  ASSERT_TRUE(last.ok());
  EXPECT_EQ(last->shape, (Shape{0, 4}));
  // Cutting dim 1 keeps both components, columns 2..3.
  Result<LocalTensor> cols = ShardLocal(*fc1, 1, 1, 2, nullptr);
  ASSERT_TRUE(cols.ok());
  EXPECT_EQ(cols->segments[1].global_box, Box({3, 2}, {3, 2}));
  EXPECT_EQ(cols->segments[1].local_offset, (Shape{3, 0}));
}

TEST(ShardLocalTest, StackedExpertsKeepWholeExperts) {
  // Per-expert tensors stacked in one local [4, 2, 3]: cut dim 0 over 2.
  ExpertParallel ep{4, 0, 1};
  Result<LocalTensor> t =
      PerExpertWeights([](int e) { return "experts." + std::to_string(e) + ".w"; }, DType::kF32,
                       nullptr, {2, 3}, -1, ep, 0, 1);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  Result<LocalTensor> s = ShardLocal(*t, 0, 1, 2, nullptr);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->shape, (Shape{2, 2, 3}));
  ASSERT_EQ(s->segments.size(), 2u);
  EXPECT_EQ(s->segments[0].key, "experts.2.w");
  EXPECT_EQ(s->segments[0].local_offset, (Shape{0, 0, 0}));
  EXPECT_EQ(s->segments[1].key, "experts.3.w");
  EXPECT_EQ(s->segments[1].local_offset, (Shape{1, 0, 0}));
}

TEST(ShardLocalTest, RejectsFlatAndBadArguments) {
  LocalTensor w = WholeTensor("w", DType::kF32, nullptr, {4});
  EXPECT_FALSE(ShardLocal(w, 1, 0, 2, nullptr).ok());
  EXPECT_FALSE(ShardLocal(w, 0, 2, 2, nullptr).ok());
  EXPECT_FALSE(ShardLocal(w, 0, 0, 0, nullptr).ok());
  Result<LocalTensor> flat = FlatShard(w, {0, 2}, nullptr);
  ASSERT_TRUE(flat.ok());
  EXPECT_FALSE(ShardLocal(*flat, 0, 0, 2, nullptr).ok());
}

// Regression (e): FSDP2 x TP shards, even, uneven and with empty shards, saved
// and loaded back into other meshes and into one whole tensor, bit for bit.
// Column-parallel weights use the placements (where they describe FSDP2's
// data) or ShardLocal (always); row-parallel ones (Shard(0), Shard(1)).
TEST(DTensorTest, RegressionFsdp2TpStridedRoundTrip) {
  struct Mesh {
    int dp, tp;
  };
  const std::vector<Mesh> meshes = {{2, 2}, {4, 2}, {1, 4}, {3, 1}, {2, 3}};
  const std::vector<int64_t> rows = {6, 5, 3, 1, 0, 8};
  testing::RefModel ref;
  for (int64_t n : rows) {
    ref["col" + std::to_string(n)] = testing::RandomRefTensor(DType::kBF16, {n, 3}, 7 + n);
    ref["row" + std::to_string(n)] = testing::RandomRefTensor(DType::kF32, {3, n}, 70 + n);
    ref["fused" + std::to_string(n)] = testing::RandomRefTensor(DType::kF32, {2 * n, 2}, 9 + n);
  }
  auto build = [&](const Mesh& m, bool placements) {
    std::vector<testing::TestRank> ranks(m.dp * m.tp);
    for (int r = 0; r < m.dp * m.tp; ++r) {
      const int dp = r / m.tp, tp = r % m.tp;
      testing::TestRank& rank = ranks[r];
      const DeviceMesh mesh{{m.dp, m.tp}, {dp, tp}};
      for (int64_t n : rows) {
        const std::string col = "col" + std::to_string(n);
        LocalTensor t;
        if (placements) {
          t = *DTensorShard(col, DType::kBF16, nullptr, {n, 3}, mesh, Fsdp2Tp(m.tp));
        } else {
          t = *ShardLocal(*ColumnParallel(col, DType::kBF16, nullptr, {n, 3}, tp, m.tp), 0, dp,
                          m.dp, nullptr);
        }
        t.data = rank.arena.Alloc(Box::Whole(t.shape).num_elements(), t.dtype);
        rank.state.tensors.push_back(t);
        t = *DTensorShard("row" + std::to_string(n), DType::kF32, nullptr, {3, n}, mesh,
                          {P::Shard(0), P::Shard(1)});
        t.data = rank.arena.Alloc(Box::Whole(t.shape).num_elements(), t.dtype);
        rank.state.tensors.push_back(t);
        // A fused [W_i; V_i] (both halves of one key) under FSDP2.
        const std::string fused = "fused" + std::to_string(n);
        Result<LocalTensor> f = SwiGluFc1(fused, fused, DType::kF32, nullptr, n, {2}, tp, m.tp);
        EXPECT_TRUE(f.ok()) << f.status().ToString();
        t = *ShardLocal(*f, 0, dp, m.dp, nullptr);
        t.data = rank.arena.Alloc(Box::Whole(t.shape).num_elements(), t.dtype);
        rank.state.tensors.push_back(t);
      }
    }
    return ranks;
  };
  std::unique_ptr<Storage> mem = NewMemStorage();
  SaveOptions so;
  so.storage = mem.get();
  LoadOptions lo;
  lo.storage = mem.get();
  int saved = 0;
  for (const Mesh& from : meshes) {
    for (bool placements : {false, true}) {
      // Either description tiles every tensor, so each saves and reloads.
      std::vector<testing::TestRank> src = build(from, placements);
      for (testing::TestRank& r : src) {
        ASSERT_TRUE(testing::FillFromReference(ref, r.state.tensors).ok());
      }
      const std::string dir = "/ckpt" + std::to_string(saved++);
      Status s = testing::SaveRanks(testing::StatesOf(src), dir, so);
      ASSERT_TRUE(s.ok()) << s.ToString();
      for (const Mesh& to : meshes) {
        std::vector<testing::TestRank> dst = build(to, !placements);
        s = testing::LoadRanks(testing::StatesOf(dst), dir, lo);
        ASSERT_TRUE(s.ok()) << s.ToString();
        for (testing::TestRank& r : dst) {
          Status c = testing::CheckAgainstReference(ref, r.state.tensors);
          ASSERT_TRUE(c.ok()) << from.dp << "x" << from.tp << " -> " << to.dp << "x" << to.tp
                              << ": " << c.ToString();
        }
      }
      // And into one whole tensor per key on a single rank.
      testing::TestRank whole;
      for (const auto& [key, t] : ref) {
        LocalTensor w = WholeTensor(key, t.dtype, nullptr, t.shape);
        w.data = whole.arena.Alloc(Box::Whole(t.shape).num_elements(), t.dtype);
        whole.state.tensors.push_back(w);
      }
      s = testing::LoadRanks({&whole.state}, dir, lo);
      ASSERT_TRUE(s.ok()) << s.ToString();
      ASSERT_TRUE(testing::CheckAgainstReference(ref, whole.state.tensors).ok());
    }
  }
}

}  // namespace
}  // namespace shardpoint
