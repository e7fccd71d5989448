// Megatron-style layouts: TP column/row, vocab padding, PP layer numbering
// with virtual stages and an extra (MTP) block, EP experts.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "shardpoint/layout.h"
#include "shardpoint/layout_megatron.h"
#include "tests/testing/ranks.h"
#include "tests/testing/reference.h"

namespace shardpoint {
namespace {

using ::testing::HasSubstr;

TEST(MegatronTest, ColumnAndRowParallel) {
  Result<LocalTensor> c = ColumnParallel("fc1", DType::kBF16, nullptr, {10, 4}, 3, 4);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->segments[0].global_box, Box({9, 0}, {1, 4}));  // 3, 3, 3, 1
  Result<LocalTensor> r = RowParallel("fc2", DType::kBF16, nullptr, {4, 10}, 1, 4);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->segments[0].global_box, Box({0, 3}, {4, 3}));
  EXPECT_EQ(r->shape, (Shape{4, 3}));
  EXPECT_FALSE(ColumnParallel("fc1", DType::kBF16, nullptr, {10, 4}, 4, 4).ok());
  EXPECT_FALSE(RowParallel("b", DType::kBF16, nullptr, {10}, 0, 2).ok());  // no dim 1
}

TEST(MegatronTest, PaddedVocab) {
  EXPECT_EQ(PaddedVocabSize(50257, 128, 1), 50304);
  EXPECT_EQ(PaddedVocabSize(50257, 128, 8), 51200);
  EXPECT_EQ(PaddedVocabSize(1024, 128, 8), 1024);
  Result<LocalTensor> e = VocabParallel("emb", DType::kBF16, nullptr, 12, 3, 2, 4);
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->segments[0].global_box, Box({6, 0}, {3, 3}));
  Status s = VocabParallel("emb", DType::kBF16, nullptr, 10, 3, 0, 4).status();
  EXPECT_THAT(s.message(), HasSubstr("'emb': padded vocabulary 10 is not divisible by TP size 4"));
  EXPECT_FALSE(VocabParallel("emb", DType::kBF16, nullptr, 12, 3, 4, 4).ok());
}

// Vocab 10 padded for TP2 (divisible by 2 * 2: 12 rows), loaded under TP4
// (divisible by 2 * 4: 16 rows) with allow_shape_mismatch: the real rows
// arrive, the stored padding rows too, and rows past the stored 12 are zero.
TEST(MegatronTest, PaddedVocabLoadsIntoAnotherPadding) {
  const int64_t vocab = 10, hidden = 3;
  const int64_t pad2 = PaddedVocabSize(vocab, 2, 2), pad4 = PaddedVocabSize(vocab, 2, 4);
  ASSERT_EQ(pad2, 12);
  ASSERT_EQ(pad4, 16);
  testing::RefModel ref;
  ref["emb"] = testing::RandomRefTensor(DType::kF32, {pad2, hidden}, 5);
  std::vector<testing::TestRank> src(2);
  for (int r = 0; r < 2; ++r) {
    LocalTensor t = *VocabParallel("emb", DType::kF32, nullptr, pad2, hidden, r, 2);
    t.data = src[r].arena.Alloc(pad2 / 2 * hidden, DType::kF32);
    src[r].state.tensors.push_back(t);
    ASSERT_TRUE(testing::FillFromReference(ref, src[r].state.tensors).ok());
  }
  std::unique_ptr<Storage> mem = NewMemStorage();
  SaveOptions so;
  so.storage = mem.get();
  ASSERT_TRUE(testing::SaveRanks(testing::StatesOf(src), "/c", so).ok());

  std::vector<testing::TestRank> dst(4);
  std::vector<float*> mem4;
  for (int r = 0; r < 4; ++r) {
    LocalTensor t = *VocabParallel("emb", DType::kF32, nullptr, pad4, hidden, r, 4);
    t.data = dst[r].arena.Alloc(pad4 / 4 * hidden, DType::kF32);
    std::memset(t.data, 0x7f, pad4 / 4 * hidden * sizeof(float));  // not zero
    mem4.push_back(static_cast<float*>(t.data));
    dst[r].state.tensors.push_back(t);
  }
  LoadOptions lo;
  lo.storage = mem.get();
  Status s = testing::LoadRanks(testing::StatesOf(dst), "/c", lo);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);  // shape differs
  lo.allow_shape_mismatch = true;
  s = testing::LoadRanks(testing::StatesOf(dst), "/c", lo);
  ASSERT_TRUE(s.ok()) << s.ToString();
  const float* truth = reinterpret_cast<const float*>(ref["emb"].bytes.data());
  for (int64_t row = 0; row < pad4; ++row) {
    for (int64_t c = 0; c < hidden; ++c) {
      const float got = mem4[row / 4][(row % 4) * hidden + c];
      if (row < pad2) {
        EXPECT_EQ(std::memcmp(&got, &truth[row * hidden + c], 4), 0) << row;
      } else {
        EXPECT_EQ(got, 0.0f) << row;
      }
    }
  }
}

TEST(MegatronTest, StageLayersEvenVirtualAndExplicit) {
  PipelineLayout p{8, 2, 1, {}};
  EXPECT_EQ(*StageLayers(p, 1, 0), (std::vector<int>{4, 5, 6, 7}));
  // Virtual stages: chunk (vp, pp) is number vp * pp_size + pp.
  p = {8, 2, 2, {}};
  EXPECT_EQ(*StageLayers(p, 0, 0), (std::vector<int>{0, 1}));
  EXPECT_EQ(*StageLayers(p, 1, 0), (std::vector<int>{2, 3}));
  EXPECT_EQ(*StageLayers(p, 0, 1), (std::vector<int>{4, 5}));
  EXPECT_EQ(*StageLayers(p, 1, 1), (std::vector<int>{6, 7}));
  EXPECT_EQ(*GlobalLayer(p, 1, 1, 1), 7);
  // Uneven stages (a first stage with the embedding gets fewer layers).
  p = {7, 2, 1, {3, 4}};
  EXPECT_EQ(*StageLayers(p, 1, 0), (std::vector<int>{3, 4, 5, 6}));
  p = {2, 2, 1, {2, 0}};
  EXPECT_TRUE(StageLayers(p, 1, 0)->empty());
  EXPECT_THAT(StageLayers({7, 2, 1, {}}, 0, 0).status().message(),
              HasSubstr("7 layers do not split evenly into 2 pipeline chunks"));
  EXPECT_FALSE(StageLayers({7, 2, 1, {3, 3}}, 0, 0).ok());
  EXPECT_FALSE(StageLayers({2, 2, 1, {3, -1}}, 0, 0).ok());
  EXPECT_FALSE(StageLayers({8, 2, 1, {}}, 2, 0).ok());
  EXPECT_FALSE(StageLayers({8, 2, 2, {}}, 0, 2).ok());
  EXPECT_THAT(GlobalLayer({8, 2, 1, {}}, 0, 0, 4).status().message(),
              HasSubstr("local layer 4 of pipeline rank 0"));
  EXPECT_EQ(LayerKey("decoder.layers", 5, "mlp.linear_fc1.weight"),
            "decoder.layers.5.mlp.linear_fc1.weight");
}

// Regression (a): every pipeline chunk numbers its layers globally, and the
// extra block after the decoder (multi-token prediction) has its own prefix,
// so no key of one stage or block collides with another's. With local
// numbering stage 1's "decoder.layers.0" would be taken for a replica of
// stage 0's and one of them silently dropped; here, saved under PP2 x VP2
// with an MTP block on the last stage, every layer reloads under PP1 with
// its own data.
TEST(MegatronTest, RegressionPipelineAndMtpKeysDoNotCollide) {
  const PipelineLayout pp{8, 2, 2, {}};
  const std::vector<std::string> names = {"self_attention.linear_qkv.weight", "mlp.fc.weight"};
  const int mtp_layers = 2;
  testing::RefModel ref;
  auto add = [&](const std::string& key) {
    ref[key] = testing::RandomRefTensor(DType::kF32, {2, 3}, ref.size() + 1);
  };
  std::vector<testing::TestRank> ranks(2);
  std::set<std::string> seen;
  for (int stage = 0; stage < 2; ++stage) {
    for (int vp = 0; vp < 2; ++vp) {
      std::vector<int> layers = *StageLayers(pp, stage, vp);
      for (size_t local = 0; local < layers.size(); ++local) {
        ASSERT_EQ(*GlobalLayer(pp, stage, vp, static_cast<int>(local)), layers[local]);
        for (const std::string& n : names) {
          const std::string key = LayerKey("decoder.layers", layers[local], n);
          EXPECT_TRUE(seen.insert(key).second) << key << " collides";
          add(key);
          LocalTensor t =
              WholeTensor(key, DType::kF32, ranks[stage].arena.Alloc(6, DType::kF32), {2, 3});
          ranks[stage].state.tensors.push_back(t);
        }
      }
    }
  }
  for (int k = 0; k < mtp_layers; ++k) {  // on the last stage
    for (const std::string& n : names) {
      const std::string key = LayerKey("mtp.layers", k, n);
      EXPECT_TRUE(seen.insert(key).second) << key << " collides";
      add(key);
      ranks[1].state.tensors.push_back(
          WholeTensor(key, DType::kF32, ranks[1].arena.Alloc(6, DType::kF32), {2, 3}));
    }
  }
  EXPECT_EQ(seen.size(), (8u + mtp_layers) * names.size());
  for (testing::TestRank& r : ranks) {
    ASSERT_TRUE(testing::FillFromReference(ref, r.state.tensors).ok());
  }
  std::unique_ptr<Storage> mem = NewMemStorage();
  SaveOptions so;
  so.storage = mem.get();
  ASSERT_TRUE(testing::SaveRanks(testing::StatesOf(ranks), "/c", so).ok());
  testing::TestRank one;
  for (const auto& [key, t] : ref) {
    one.state.tensors.push_back(
        WholeTensor(key, DType::kF32, one.arena.Alloc(6, DType::kF32), {2, 3}));
  }
  LoadOptions lo;
  lo.storage = mem.get();
  ASSERT_TRUE(testing::LoadRanks({&one.state}, "/c", lo).ok());
  Status c = testing::CheckAgainstReference(ref, one.state.tensors);
  EXPECT_TRUE(c.ok()) << c.ToString();
}

TEST(MegatronTest, PerExpertWeightsCarryGlobalExpertIndices) {
  // 8 experts over EP 4: rank 2 holds experts 4 and 5; fc2 [H=4, I=6] split
  // on dim 1 over expert-TP 2.
  ExpertParallel ep{8, 2, 4};
  EXPECT_EQ(ep.local_experts(), 2);
  EXPECT_EQ(ep.first_expert(), 4);
  auto key_of = [](int e) { return "experts." + std::to_string(e) + ".fc2"; };
  Result<LocalTensor> t = PerExpertWeights(key_of, DType::kBF16, nullptr, {4, 6}, 1, ep, 1, 2);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->shape, (Shape{2, 4, 3}));
  ASSERT_EQ(t->segments.size(), 2u);
  EXPECT_EQ(t->segments[0].key, "experts.4.fc2");
  EXPECT_EQ(t->segments[1].key, "experts.5.fc2");
  EXPECT_EQ(t->segments[1].global_box, Box({0, 3}, {4, 3}));
  EXPECT_EQ(t->segments[1].local_offset, (Shape{1, 0, 0}));
  // Stacked: one [8, 4, 6] tensor split on dim 0 over EP and dim 2 over TP.
  Result<LocalTensor> s = StackedExperts("experts.fc2", DType::kBF16, nullptr, {4, 6}, 1, ep, 1, 2);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->shape, (Shape{2, 4, 3}));
  EXPECT_EQ(s->segments[0].global_shape, (Shape{8, 4, 6}));
  EXPECT_EQ(s->segments[0].global_box, Box({4, 0, 3}, {2, 4, 3}));
  EXPECT_THAT(PerExpertWeights(key_of, DType::kBF16, nullptr, {4, 6}, 1, {7, 0, 4}, 0, 1)
                  .status()
                  .message(),
              HasSubstr("7 experts do not split over EP rank 0 of 4"));
  EXPECT_FALSE(StackedExperts("x", DType::kBF16, nullptr, {4, 6}, 2, ep, 0, 2).ok());
}

TEST(MegatronTest, FusedGateUpExperts) {
  // [E=4, 2I=2*5, H=2], EP 2 (rank 1: experts 2, 3), expert-TP 2 (rank 0:
  // rows 0..2 of each of gate and up).
  Result<LocalTensor> t = FusedGateUpExperts("fc1", DType::kF32, nullptr, 5, 2, {4, 1, 2}, 0, 2);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->shape, (Shape{2, 6, 2}));
  ASSERT_EQ(t->segments.size(), 4u);
  EXPECT_EQ(t->segments[0].global_box, Box({2, 0, 0}, {1, 3, 2}));  // expert 2 gate
  EXPECT_EQ(t->segments[1].global_box, Box({2, 5, 0}, {1, 3, 2}));  // expert 2 up
  EXPECT_EQ(t->segments[1].local_offset, (Shape{0, 3, 0}));
  EXPECT_EQ(t->segments[3].global_box, Box({3, 5, 0}, {1, 3, 2}));
  EXPECT_EQ(t->segments[3].local_offset, (Shape{1, 3, 0}));
  // TP rank 1 holds 2 rows of each.
  t = FusedGateUpExperts("fc1", DType::kF32, nullptr, 5, 2, {4, 1, 2}, 1, 2);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->shape, (Shape{2, 4, 2}));
  EXPECT_EQ(t->segments[1].global_box, Box({2, 8, 0}, {1, 2, 2}));
}

}  // namespace
}  // namespace shardpoint
