// Fused weights (SwiGLU, GQA QKV, GDN) and flat buffers in item coordinates.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "shardpoint/layout.h"
#include "shardpoint/layout_flat.h"
#include "shardpoint/layout_fused.h"
#include "shardpoint/layout_state.h"
#include "src/plan/regions.h"
#include "tests/testing/ranks.h"
#include "tests/testing/reference.h"

namespace shardpoint {
namespace {

using ::testing::HasSubstr;

// "key[box]@local_offset" for every segment, in order.
std::vector<std::string> Segments(const LocalTensor& t) {
  std::vector<std::string> out;
  for (const Segment& s : t.segments) {
    out.push_back(s.key + s.global_box.ToString() + "@" + ShapeToString(s.local_offset));
  }
  return out;
}

// "key[box]" of every non-empty region of `tensors`.
std::vector<std::string> Regions(const std::vector<LocalTensor>& tensors) {
  Result<std::vector<internal_plan::Region>> r = internal_plan::BuildRegions(tensors);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  std::vector<std::string> out;
  for (const internal_plan::Region& g : *r) {
    if (!g.desc.box.empty()) out.push_back(g.desc.key + g.desc.box.ToString());
  }
  return out;
}

using Strings = std::vector<std::string>;

TEST(FusedTest, FusedShardConcatenatesTpShardsOfEveryPart) {
  // a [5, 2] and rows 2..7 of b [8, 2], over TP 2: a rows 3..4, b rows 5..7.
  Result<LocalTensor> t =
      FusedShard(DType::kF32, nullptr, {{"a", {5, 2}, 0, -1}, {"b", {8, 2}, 2, 6}}, 0, 1, 2);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->shape, (Shape{5, 2}));
  EXPECT_EQ(Segments(*t), (Strings{"a[3:5, 0:2]@[0, 0]", "b[5:8, 0:2]@[2, 0]"}));
  auto err = [](std::vector<FusedPart> parts, int dim, int rank, int size) {
    return FusedShard(DType::kF32, nullptr, parts, dim, rank, size).status().message();
  };
  EXPECT_THAT(err({}, 0, 0, 1), HasSubstr("no parts"));
  EXPECT_THAT(err({{"a", {5, 2}, 0, -1}}, 0, 2, 2), HasSubstr("TP rank 2 of 2"));
  EXPECT_THAT(err({{"a", {5, 2}, 0, -1}}, 2, 0, 1), HasSubstr("'a'"));
  EXPECT_THAT(err({{"a", {5, 2}, 4, 2}}, 0, 0, 1), HasSubstr("rows [4, 6) are outside dim 0"));
  EXPECT_THAT(err({{"a", {5, 2}, 0, -1}, {"b", {5, 3}, 0, -1}}, 0, 0, 1),
              HasSubstr("'b' of shape [5, 3] differs from part 0 outside dim 0"));
  EXPECT_THAT(err({{"a", {5, 2}, 0, -1}, {"b", {5}, 0, -1}}, 0, 0, 1),
              HasSubstr("differs in rank"));
}

TEST(FusedTest, SwiGluOneKeyOrTwo) {
  // F = 5 over TP 2 (3 + 2 rows): rank 1 holds W rows 3..4 and V rows 3..4.
  Result<LocalTensor> two = SwiGluFc1("w", "v", DType::kBF16, nullptr, 5, {4}, 1, 2);
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(two->shape, (Shape{4, 4}));
  EXPECT_EQ(Segments(*two), (Strings{"w[3:5, 0:4]@[0, 0]", "v[3:5, 0:4]@[2, 0]"}));
  // One [2F, H] key (Megatron's layout): V is rows F..2F-1.
  Result<LocalTensor> one = SwiGluFc1("fc1", "fc1", DType::kBF16, nullptr, 5, {4}, 1, 2);
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(Segments(*one), (Strings{"fc1[3:5, 0:4]@[0, 0]", "fc1[8:10, 0:4]@[2, 0]"}));
  // The bias: trailing {}.
  Result<LocalTensor> bias = SwiGluFc1("b", "b", DType::kBF16, nullptr, 4, {}, 0, 2);
  ASSERT_TRUE(bias.ok());
  EXPECT_EQ(Segments(*bias), (Strings{"b[0:2]@[0]", "b[4:6]@[2]"}));
}

TEST(FusedTest, GqaQkvInterleavedPerQueryGroup) {
  // 4 heads in 2 groups, head_dim 2, hidden 3, TP 2: rank 1 holds group 1 as
  // [q heads 2, 3 (rows 4..7); k head 1 (rows 2..3); v head 1 (rows 2..3)].
  Result<LocalTensor> t = GqaQkv("q", "k", "v", DType::kBF16, nullptr, {4, 2, 2}, {3}, 1, 2);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->shape, (Shape{8, 3}));
  EXPECT_EQ(Segments(*t),
            (Strings{"q[4:8, 0:3]@[0, 0]", "k[2:4, 0:3]@[4, 0]", "v[2:4, 0:3]@[6, 0]"}));
  // TP 1: both groups, interleaved.
  t = GqaQkv("q", "k", "v", DType::kBF16, nullptr, {4, 2, 2}, {3}, 0, 1);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(Segments(*t),
            (Strings{"q[0:4, 0:3]@[0, 0]", "k[0:2, 0:3]@[4, 0]", "v[0:2, 0:3]@[6, 0]",
                     "q[4:8, 0:3]@[8, 0]", "k[2:4, 0:3]@[12, 0]", "v[2:4, 0:3]@[14, 0]"}));
  EXPECT_FALSE(GqaQkv("q", "k", "v", DType::kBF16, nullptr, {4, 2, 2}, {3}, 0, 4).ok());
  EXPECT_FALSE(GqaQkv("q", "k", "v", DType::kBF16, nullptr, {5, 2, 2}, {3}, 0, 1).ok());
}

TEST(FusedTest, GdnInProjAndConv1d) {
  // q, k: 2 heads x 2 = 4 rows; v, z: 2 heads x 3 = 6 rows; beta, alpha 2.
  const GdnDims dims{2, 2, 2, 3};
  EXPECT_EQ(dims.Components(), (std::vector<int64_t>{4, 4, 6, 6, 2, 2}));
  Result<LocalTensor> t = GdnInProj("in_proj", DType::kBF16, nullptr, dims, 5, 1, 2);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->shape, (Shape{12, 5}));
  EXPECT_EQ(Segments(*t), (Strings{"in_proj[2:4, 0:5]@[0, 0]", "in_proj[6:8, 0:5]@[2, 0]",
                                   "in_proj[11:14, 0:5]@[4, 0]", "in_proj[17:20, 0:5]@[7, 0]",
                                   "in_proj[21:22, 0:5]@[10, 0]", "in_proj[23:24, 0:5]@[11, 0]"}));
  Result<LocalTensor> c = GdnConv1d("conv1d", DType::kBF16, nullptr, dims, {1, 4}, 0, 2);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->shape, (Shape{7, 1, 4}));
  EXPECT_EQ(c->segments[0].global_shape, (Shape{14, 1, 4}));
  EXPECT_EQ(Segments(*c),
            (Strings{"conv1d[0:2, 0:1, 0:4]@[0, 0, 0]", "conv1d[4:6, 0:1, 0:4]@[2, 0, 0]",
                     "conv1d[8:11, 0:1, 0:4]@[4, 0, 0]"}));
}

TEST(FlatBufferTest, PlanAlignsAndPads) {
  std::vector<LocalTensor> params = {WholeTensor("a", DType::kBF16, nullptr, {3}),
                                     WholeTensor("b", DType::kBF16, nullptr, {2, 3}),
                                     WholeTensor("c", DType::kBF16, nullptr, {})};
  Result<FlatBufferLayout> l = PlanFlatBuffer(params, 4, 3);
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->offsets, (std::vector<int64_t>{0, 4, 12}));
  EXPECT_EQ(l->sizes, (std::vector<int64_t>{3, 6, 1}));
  EXPECT_EQ(l->total, 24);  // 13 rounded up to 3 * 4
  EXPECT_EQ(l->shard_size, 8);
  EXPECT_FALSE(PlanFlatBuffer(params, 0, 2).ok());
  EXPECT_FALSE(PlanFlatBuffer(params, 1, 0).ok());
  params.push_back(*FlatShard(WholeTensor("d", DType::kBF16, nullptr, {4}), {0, 2}, nullptr));
  EXPECT_THAT(PlanFlatBuffer(params, 1, 1).status().message(),
              HasSubstr("parameter 3 'd' is flat or strided"));
}

TEST(FlatBufferTest, ShardsSplitParametersInItemCoordinates) {
  std::vector<LocalTensor> params = {WholeTensor("a", DType::kF32, nullptr, {3}),
                                     WholeTensor("b", DType::kF32, nullptr, {2, 3}),
                                     WholeTensor("c", DType::kF32, nullptr, {})};
  const FlatBufferLayout l = *PlanFlatBuffer(params, 4, 3);  // a 0..2, b 4..9, c 12
  float shard[8];
  // Rank 0: [0, 8): a whole, b elements 0..3 (row 0 and half of row 1).
  Result<std::vector<LocalTensor>> r0 = FlatBufferShard(params, l, 0, shard);
  ASSERT_TRUE(r0.ok()) << r0.status().ToString();
  EXPECT_EQ(Regions(*r0), (Strings{"a[0:3]", "b[0:1, 0:3]", "b[1:2, 0:1]"}));
  EXPECT_EQ((*r0)[1].data, shard + 4);
  EXPECT_EQ(*(*r0)[1].flat, (FlatRange{0, 4}));
  // Rank 1: [8, 16): b elements 4..5, c.
  Result<std::vector<LocalTensor>> r1 = FlatBufferShard(params, l, 1, shard);
  ASSERT_TRUE(r1.ok());
  EXPECT_EQ(Regions(*r1), (Strings{"b[1:2, 1:3]", "c[]"}));
  EXPECT_EQ((*r1)[1].data, shard);
  EXPECT_EQ((*r1)[2].data, shard + 4);
  EXPECT_EQ((*r1)[0].flat->size(), 0);
  // Rank 2 holds only padding: every piece is an empty declaration.
  Result<std::vector<LocalTensor>> r2 = FlatBufferShard(params, l, 2, shard);
  ASSERT_TRUE(r2.ok());
  EXPECT_TRUE(Regions(*r2).empty());
  EXPECT_FALSE(FlatBufferShard(params, l, 3, shard).ok());
  params[1].dtype = DType::kBF16;
  EXPECT_THAT(FlatBufferShard(params, l, 0, shard).status().message(),
              HasSubstr("parameter 1 differs in dtype"));
  // An explicit dtype lays out fp32 optimizer state of bf16 parameters.
  Result<std::vector<LocalTensor>> f = FlatBufferShard(params, l, 0, shard, DType::kF32);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ((*f)[1].dtype, DType::kF32);
}

// Regression (d): SwiGLU and GDN splits computed in item coordinates while
// the optimizer states (fp32 main params, exp_avg, exp_avg_sq) are plain
// local tensors in a distributed-optimizer flat buffer, not the bf16
// parameter's own type. On TP rank 1 of 2, fc1 = [W_1; V_1] of [2 * 4, 3]
// (24 elements: W 0..11, V 12..23), then GDN in_proj in the same buffer.
// DP 4 (shards of 12 from a 48-element buffer) puts a boundary on the W/V
// border; DP 5 (shards of 10) puts them inside W (mid-row) and inside V.
TEST(FlatBufferTest, RegressionSwiGluAndGdnInItemCoordinates) {
  const int64_t ffn = 8, hidden = 3;
  const GdnDims gdn{2, 1, 2, 2};  // q, k: 2 rows; v, z: 4; beta, alpha: 2
  const int tp_rank = 1, tp_size = 2;
  auto params = [&]() {
    std::vector<LocalTensor> p;
    p.push_back(*SwiGluFc1("fc1", "fc1", DType::kBF16, nullptr, ffn, {hidden}, tp_rank, tp_size));
    p.push_back(*GdnInProj("in_proj", DType::kBF16, nullptr, gdn, hidden, tp_rank, tp_size));
    return p;
  };
  ASSERT_EQ(Box::Whole(params()[0].shape).num_elements(), 24);
  ASSERT_EQ(Box::Whole(params()[1].shape).num_elements(), 24);  // 8 rows of 3

  // Where the boundaries fall, in the fused fc1's own coordinates.
  {
    const std::vector<LocalTensor> p = params();
    const FlatBufferLayout l4 = *PlanFlatBuffer(p, 1, 4);
    ASSERT_EQ(l4.shard_size, 12);
    float mem[12];
    // DP rank 0 of 4: exactly W_1 (rows 4..7 of fc1); rank 1: exactly V_1.
    EXPECT_EQ(Regions({(*FlatBufferShard(p, l4, 0, mem, DType::kF32))[0]}),
              (Strings{"fc1[4:8, 0:3]"}));
    EXPECT_EQ(Regions({(*FlatBufferShard(p, l4, 1, mem, DType::kF32))[0]}),
              (Strings{"fc1[12:16, 0:3]"}));
    const FlatBufferLayout l5 = *PlanFlatBuffer(p, 1, 5);
    ASSERT_EQ(l5.shard_size, 10);
    // DP rank 0 of 5: W rows 4..6 and one element of row 7 (inside W).
    EXPECT_EQ(Regions({(*FlatBufferShard(p, l5, 0, mem, DType::kF32))[0]}),
              (Strings{"fc1[4:7, 0:3]", "fc1[7:8, 0:1]"}));
    // DP rank 1: the rest of W, then V (across the border), to inside V.
    EXPECT_EQ(Regions({(*FlatBufferShard(p, l5, 1, mem, DType::kF32))[0]}),
              (Strings{"fc1[7:8, 1:3]", "fc1[12:14, 0:3]", "fc1[14:15, 0:2]"}));
    // DP rank 2: inside V, then GDN in_proj's q and k (rows 1 and 3 of 24).
    EXPECT_EQ(
        Regions(*FlatBufferShard(p, l5, 2, mem, DType::kF32)),
        (Strings{"fc1[14:15, 2:3]", "fc1[15:16, 0:3]", "in_proj[1:2, 0:3]", "in_proj[3:4, 0:3]"}));
  }

  // Round trip: optimizer state under TP2 x DP{4,5} distributed optimizer,
  // reloaded into plain TP-1 whole tensors and into TP 2 x DP 3, bit for bit.
  testing::RefModel ref;
  const Shape fc1_shape{2 * ffn, hidden}, gdn_shape{16, hidden};
  for (const char* st : {"fp32_param", "exp_avg", "exp_avg_sq"}) {
    const std::string pre = std::string("optimizer.") + st + ".";
    ref[pre + "fc1"] = testing::RandomRefTensor(DType::kF32, fc1_shape, ref.size() + 3);
    ref[pre + "in_proj"] = testing::RandomRefTensor(DType::kF32, gdn_shape, ref.size() + 3);
  }
  auto build = [&](int dp_size) {
    std::vector<testing::TestRank> ranks(tp_size * dp_size);
    for (int r = 0; r < tp_size * dp_size; ++r) {
      const int tp = r % tp_size, dp = r / tp_size;
      std::vector<LocalTensor> p;
      p.push_back(*SwiGluFc1("fc1", "fc1", DType::kBF16, nullptr, ffn, {hidden}, tp, tp_size));
      p.push_back(*GdnInProj("in_proj", DType::kBF16, nullptr, gdn, hidden, tp, tp_size));
      const FlatBufferLayout l = *PlanFlatBuffer(p, 2, dp_size);
      for (const char* st : {"fp32_param", "exp_avg", "exp_avg_sq"}) {
        void* shard = ranks[r].arena.Alloc(l.shard_size, DType::kF32);
        State s;
        s.tensors = *FlatBufferShard(p, l, dp, shard, DType::kF32);
        AddKeyPrefix(&s, std::string("optimizer.") + st + ".");
        for (LocalTensor& t : s.tensors) ranks[r].state.tensors.push_back(std::move(t));
      }
    }
    return ranks;
  };
  std::unique_ptr<Storage> mem = NewMemStorage();
  SaveOptions so;
  so.storage = mem.get();
  LoadOptions lo;
  lo.storage = mem.get();
  for (int dp_size : {4, 5}) {
    std::vector<testing::TestRank> src = build(dp_size);
    for (testing::TestRank& r : src) {
      ASSERT_TRUE(testing::FillFromReference(ref, r.state.tensors).ok());
    }
    const std::string dir = "/dp" + std::to_string(dp_size);
    Status s = testing::SaveRanks(testing::StatesOf(src), dir, so);
    ASSERT_TRUE(s.ok()) << s.ToString();
    testing::TestRank whole;
    for (const auto& [key, t] : ref) {
      whole.state.tensors.push_back(
          WholeTensor(key, DType::kF32,
                      whole.arena.Alloc(Box::Whole(t.shape).num_elements(), DType::kF32), t.shape));
    }
    ASSERT_TRUE(testing::LoadRanks({&whole.state}, dir, lo).ok());
    Status c = testing::CheckAgainstReference(ref, whole.state.tensors);
    EXPECT_TRUE(c.ok()) << c.ToString();
    std::vector<testing::TestRank> dst = build(3);
    ASSERT_TRUE(testing::LoadRanks(testing::StatesOf(dst), dir, lo).ok());
    for (testing::TestRank& r : dst) {
      c = testing::CheckAgainstReference(ref, r.state.tensors);
      EXPECT_TRUE(c.ok()) << c.ToString();
    }
  }
}

}  // namespace
}  // namespace shardpoint
