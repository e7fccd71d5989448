// RebuildDpBuckets on hand-made manifests: every element of every rebuilt
// parameter points at the bucket position Megatron's layout gives it (checked
// against positions written out here by hand), and buffers whose parameters
// do not tile them are DataLoss naming the bucket.
#include "src/dcp/dp_buckets.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "src/geometry/flat_range.h"

namespace shardpoint::internal_dcp {
namespace {

using internal_format::ChunkRecord;
using internal_format::Manifest;
using internal_format::TensorRecord;
using ::testing::HasSubstr;

std::string BucketKey(int k, const std::string& state, int group = 0) {
  return "optimizer.distributed.dp_group_idx_" + std::to_string(group) +
         ".gbuf_idx_0.dtype_(torch.float32, torch.float32).bucket_idx_" + std::to_string(k) + "." +
         state;
}

DpBucketArgs Args(int tp, int pp) {
  DpBucketArgs a;
  a.tp_size = tp;
  a.pp_size = pp;
  return a;
}

// A model tensor stored as one chunk per layer (stacked) or one chunk.
TensorRecord Model(const std::string& key, Shape shape, bool stacked) {
  TensorRecord t{key, DType::kF32, shape, {}};
  for (int64_t l = 0; l < (stacked ? shape[0] : 1); ++l) {
    ChunkRecord c;
    c.box = Box::Whole(shape);
    if (stacked) c.box.offset[0] = l, c.box.shape[0] = 1;
    t.chunks.push_back(c);
  }
  return t;
}

// Bucket k of `size` elements in file k, element i at byte 4 i, stored in
// chunks cut at `cuts`.
TensorRecord Bucket(int k, const std::string& state, int64_t size, std::vector<int64_t> cuts,
                    int group = 0) {
  TensorRecord t{BucketKey(k, state, group), DType::kF32, {size}, {}};
  cuts.insert(cuts.begin(), 0);
  cuts.push_back(size);
  for (size_t i = 0; i + 1 < cuts.size(); ++i) {
    ChunkRecord c;
    c.box = Box{{cuts[i]}, {cuts[i + 1] - cuts[i]}};
    c.file = static_cast<uint32_t>(k);
    c.offset = static_cast<uint64_t>(cuts[i]) * 4;
    c.nbytes = static_cast<uint64_t>(cuts[i + 1] - cuts[i]) * 4;
    if (cuts[i + 1] > cuts[i]) t.chunks.push_back(c);
  }
  return t;
}

// TP=1: embedding [3, 2], a stacked [2, 2, 3] linear_fc2 and output_layer
// [2, 5]. Reverse order: output (10) at 0, fc2 layer 1 (6) at 64 | bucket 1:
// fc2 layer 0 at 0, embedding at 64. Both buckets 70 elements.
Manifest TwoBuckets(int64_t size0 = 70, bool cover = true) {
  Manifest m;
  m.tensors = {Model("embedding.word_embeddings.weight", {3, 2}, false),
               Model("decoder.layers.mlp.linear_fc2.weight", {2, 2, 3}, true),
               Model("output_layer.weight", {2, 5}, false)};
  for (const char* s : {"param", "exp_avg"}) {
    m.tensors.push_back(
        Bucket(0, s, size0, cover ? std::vector<int64_t>{66} : std::vector<int64_t>{}));
    if (!cover) m.tensors.back().chunks[0].box.shape[0] = 66;
    m.tensors.push_back(Bucket(1, s, 70, {30}));
  }
  std::sort(m.tensors.begin(), m.tensors.end(),
            [](const TensorRecord& a, const TensorRecord& b) { return a.key < b.key; });
  return m;
}

// (bucket, position) of element `flat` (row-major in the global tensor) of `key`.
std::pair<int, int64_t> Expected(const std::string& key, int64_t flat) {
  if (key == "output_layer.weight") return {0, flat};
  if (key == "embedding.word_embeddings.weight") return {1, 64 + flat};
  const int64_t layer = flat / 6, j = flat % 6;  // fc2
  return layer == 1 ? std::pair<int, int64_t>{0, 64 + j} : std::pair<int, int64_t>{1, j};
}

TEST(DpBucketsTest, EveryElementPointsAtItsBucketPosition) {
  Manifest m = TwoBuckets();
  Result<DpBucketRebuild> r = RebuildDpBuckets(Args(1, 1), &m);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->not_rebuilt, "");
  EXPECT_EQ(r->buckets, 4);
  EXPECT_EQ(r->params, 6);                            // 3 parameters x 2 states
  EXPECT_GE(m.FindTensor(BucketKey(0, "param")), 0);  // the buckets stay
  for (const char* state : {"param", "exp_avg"}) {
    for (const char* key : {"embedding.word_embeddings.weight",
                            "decoder.layers.mlp.linear_fc2.weight", "output_layer.weight"}) {
      const int64_t t = m.FindTensor(std::string("optimizer.state.") + state + "." + key);
      ASSERT_GE(t, 0) << key;
      const TensorRecord& rec = m.tensors[t];
      EXPECT_EQ(rec.shape, m.tensors[m.FindTensor(key)].shape);
      int64_t seen = 0;
      for (const ChunkRecord& c : rec.chunks) {
        ASSERT_EQ(c.nbytes, static_cast<uint64_t>(c.box.num_elements()) * 4);
        for (int64_t e = 0; e < c.box.num_elements(); ++e, ++seen) {
          Shape idx = internal_geometry::UnravelIndex(c.box.shape, e);
          for (size_t d = 0; d < idx.size(); ++d) idx[d] += c.box.offset[d];
          const int64_t flat = internal_geometry::RowMajorIndex(rec.shape, idx);
          const auto [bucket, pos] = Expected(key, flat);
          EXPECT_EQ(c.file, static_cast<uint32_t>(bucket)) << key << " " << flat;
          EXPECT_EQ(c.offset + 4 * e, static_cast<uint64_t>(pos) * 4) << key << " " << flat;
        }
      }
      EXPECT_EQ(seen, Box::Whole(rec.shape).num_elements()) << key;
    }
  }
}

// PP=2, TP=1, tied embeddings (no output_layer.weight stored): stage 0
// (group 0) holds the embedding [3, 2] and fc2 layer 0 [2, 3]; stage 1
// (group 1) holds fc2 layer 1 and, last in model order, the output layer's
// copy of the embedding, placed (at 0) but not stored. Both buffers:
// [0, 6) and [64, 70).
TEST(DpBucketsTest, PipelineStagesAreGroupsTpPlusTpTimesPpWithTheTiedCopyPlaced) {
  Manifest m;
  m.tensors = {Model("embedding.word_embeddings.weight", {3, 2}, false),
               Model("decoder.layers.mlp.linear_fc2.weight", {2, 2, 3}, true)};
  for (int g = 0; g < 2; ++g) m.tensors.push_back(Bucket(0, "exp_avg", 70, {}, g));
  m.tensors[2].chunks[0].file = 0;
  m.tensors[3].chunks[0].file = 1;
  std::sort(m.tensors.begin(), m.tensors.end(),
            [](const TensorRecord& a, const TensorRecord& b) { return a.key < b.key; });
  DpBucketArgs a = Args(1, 2);
  a.tied = true;
  Result<DpBucketRebuild> r = RebuildDpBuckets(a, &m);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->not_rebuilt, "");
  EXPECT_EQ(r->params, 2);  // the copy is not a state of its own
  const TensorRecord& emb =
      m.tensors[m.FindTensor("optimizer.state.exp_avg.embedding.word_embeddings.weight")];
  ASSERT_EQ(emb.chunks.size(), 1u);
  EXPECT_EQ(emb.chunks[0].file, 0u);
  EXPECT_EQ(emb.chunks[0].offset, 64u * 4);
  const TensorRecord& fc2 =
      m.tensors[m.FindTensor("optimizer.state.exp_avg.decoder.layers.mlp.linear_fc2.weight")];
  ASSERT_EQ(fc2.chunks.size(), 2u);
  EXPECT_EQ(fc2.chunks[0].box, (Box{{0, 0, 0}, {1, 2, 3}}));
  EXPECT_EQ(fc2.chunks[0].file, 0u);  // layer 0: stage 0, at 0
  EXPECT_EQ(fc2.chunks[0].offset, 0u);
  EXPECT_EQ(fc2.chunks[1].file, 1u);  // layer 1: stage 1, after the copy
  EXPECT_EQ(fc2.chunks[1].offset, 64u * 4);

  a.tied = false;  // untied, the copy is not there: stage 1's buffer does not tile
  r = RebuildDpBuckets(a, &m);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
  EXPECT_THAT(r.status().message(), HasSubstr("dp_group_idx_1."));
}

// An MoE model: chained_0 (dense: the embedding [3, 2] at 0) and chained_1
// (experts: 1 layer, 2 experts, fc1 [1, 2, 2, 1], fc2 [1, 2, 1, 1]). Reverse
// model order, 64-aligned: TEGroupedMLP (fc1 w0 w1, fc2 w0 w1) puts fc2 e1 at
// 0, fc2 e0 at 64, fc1 e1 at 128, fc1 e0 at 192; SequentialMLP (e0 fc1 fc2,
// e1 fc1 fc2) fc2 e1 at 0, fc1 e1 at 64, fc2 e0 at 128, fc1 e0 at 192.
Manifest Moe() {
  Manifest m;
  m.tensors = {Model("embedding.word_embeddings.weight", {3, 2}, false),
               Model("decoder.layers.mlp.experts.linear_fc1.weight", {1, 2, 2, 1}, true),
               Model("decoder.layers.mlp.experts.linear_fc2.weight", {1, 2, 1, 1}, true)};
  for (int opt = 0; opt < 2; ++opt) {
    TensorRecord b = Bucket(0, "exp_avg", opt == 0 ? 6 : 194, {});
    b.key = "chained_" + std::to_string(opt) + "." + b.key;
    b.chunks[0].file = static_cast<uint32_t>(opt);
    m.tensors.push_back(b);
  }
  std::sort(m.tensors.begin(), m.tensors.end(),
            [](const TensorRecord& a, const TensorRecord& b) { return a.key < b.key; });
  return m;
}

// The file offset (element) of expert `e`'s state of `key` after a rebuild
// (layer `l`), and the file (bucket) it is in.
int64_t ExpertAt(const Manifest& m, const std::string& key, int64_t e, int64_t l = 0,
                 uint32_t* file = nullptr) {
  const TensorRecord& t = m.tensors[m.FindTensor("optimizer.state.exp_avg." + key)];
  for (const ChunkRecord& c : t.chunks) {
    if (c.box.offset[1] == e && c.box.shape[1] == 1 && c.box.offset[0] == l) {
      if (file) *file = c.file;
      return static_cast<int64_t>(c.offset / 4);
    }
  }
  return -1;
}

// The exp_avg chunk of `key` whose box starts at `offset`: (file, element).
std::pair<uint32_t, int64_t> StateAt(const Manifest& m, const std::string& key,
                                     const Shape& offset) {
  const TensorRecord& t = m.tensors[m.FindTensor("optimizer.state.exp_avg." + key)];
  for (const ChunkRecord& c : t.chunks) {
    if (c.box.offset == offset) return {c.file, static_cast<int64_t>(c.offset / 4)};
  }
  return {99, -1};
}

// PP=2, EP=1: 2 MoE layers, one per stage; dense chained_0 groups 0 (the
// embedding) and 1 (output_layer [2, 5]); expert chained_1 groups 0 and 1
// (= EP rank + EP x PP rank), each its stage's layer's experts.
TEST(DpBucketsTest, AnMoeModelsExpertGroupsFollowThePipelineStages) {
  Manifest m;
  m.tensors = {Model("embedding.word_embeddings.weight", {3, 2}, false),
               Model("output_layer.weight", {2, 5}, false),
               Model("decoder.layers.mlp.experts.linear_fc1.weight", {2, 2, 2, 1}, true),
               Model("decoder.layers.mlp.experts.linear_fc2.weight", {2, 2, 1, 1}, true)};
  for (int opt = 0; opt < 2; ++opt) {
    for (int g = 0; g < 2; ++g) {
      TensorRecord b = Bucket(0, "exp_avg", opt == 1 ? 194 : g == 0 ? 6 : 10, {}, g);
      b.key = "chained_" + std::to_string(opt) + "." + b.key;
      b.chunks[0].file = static_cast<uint32_t>(2 * opt + g);
      m.tensors.push_back(b);
    }
  }
  std::sort(m.tensors.begin(), m.tensors.end(),
            [](const TensorRecord& a, const TensorRecord& b) { return a.key < b.key; });
  DpBucketArgs a = Args(1, 2);
  a.grouped_gemm = true;
  Result<DpBucketRebuild> r = RebuildDpBuckets(a, &m);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->not_rebuilt, "");
  const std::string fc2 = "decoder.layers.mlp.experts.linear_fc2.weight";
  for (int64_t l = 0; l < 2; ++l) {
    uint32_t file = 99;
    EXPECT_EQ(ExpertAt(m, fc2, 0, l, &file), 64);
    EXPECT_EQ(file, 2u + static_cast<uint32_t>(l)) << l;  // chained_1 group l
  }
}

// Virtual pipeline stages and MoE: PP 2 x VPP 2 over 4 layers (stage 0
// holds layers 0 | 2, stage 1 layers 1 | 3), one expert per layer, EP 1.
// Each model chunk has its own buffers, chunk 0's first in gbuf_idx, and a
// chunk without parameters of an optimizer has none: dense group 0 has one
// buffer (chunk 0's embedding), group 1 one (chunk 1's output layer); expert
// group g's buffer 0 holds stage g's first layer, buffer 1 its second.
TEST(DpBucketsTest, ModelChunksHaveBuffersOfTheirOwnChunkZerosFirst) {
  Manifest m;
  m.tensors = {Model("embedding.word_embeddings.weight", {3, 2}, false),
               Model("output_layer.weight", {2, 5}, false),
               Model("decoder.layers.mlp.experts.linear_fc1.weight", {4, 1, 1, 1}, true),
               Model("decoder.layers.mlp.experts.linear_fc2.weight", {4, 1, 1, 1}, true)};
  for (int g = 0; g < 2; ++g) {
    TensorRecord d = Bucket(0, "exp_avg", g == 0 ? 6 : 10, {}, g);
    d.key = "chained_0." + d.key;
    d.chunks[0].file = static_cast<uint32_t>(g);
    m.tensors.push_back(d);
    for (int b = 0; b < 2; ++b) {
      TensorRecord e = Bucket(0, "exp_avg", 65, {}, g);
      e.key = "chained_1." + e.key;
      e.key.replace(e.key.find("gbuf_idx_0"), 10, "gbuf_idx_" + std::to_string(b));
      e.chunks[0].file = 10 + static_cast<uint32_t>(2 * g + b);
      m.tensors.push_back(e);
    }
  }
  std::sort(m.tensors.begin(), m.tensors.end(),
            [](const TensorRecord& a, const TensorRecord& b) { return a.key < b.key; });
  DpBucketArgs a = Args(1, 2);
  a.vpp_size = 2;
  a.grouped_gemm = true;
  Result<DpBucketRebuild> r = RebuildDpBuckets(a, &m);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->not_rebuilt, "");
  const std::string fc1 = "decoder.layers.mlp.experts.linear_fc1.weight";
  const uint32_t want_file[] = {10, 12, 11, 13};  // layer l: (group, buffer)
  for (int64_t l = 0; l < 4; ++l) {
    uint32_t file = 99;
    EXPECT_EQ(ExpertAt(m, fc1, 0, l, &file), 64) << l;
    EXPECT_EQ(file, want_file[l]) << l;
  }
  EXPECT_EQ(StateAt(m, "output_layer.weight", {0, 0}), std::make_pair(1u, int64_t{0}));
  a.vpp_size = 1;  // without model chunks: one expert buffer per group, two stored
  r = RebuildDpBuckets(a, &m);
  ASSERT_TRUE(r.ok());
  EXPECT_THAT(r->not_rebuilt, HasSubstr("gradient buffer 1 of data-parallel group 0 holds"));
}

TEST(DpBucketsTest, AnMoeModelsExpertOptimizerIsRebuiltInItsMlpsOrder) {
  const std::string fc1 = "decoder.layers.mlp.experts.linear_fc1.weight";
  const std::string fc2 = "decoder.layers.mlp.experts.linear_fc2.weight";
  for (bool grouped : {true, false}) {
    Manifest m = Moe();
    DpBucketArgs a = Args(1, 1);
    a.grouped_gemm = grouped;
    Result<DpBucketRebuild> r = RebuildDpBuckets(a, &m);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_EQ(r->not_rebuilt, "");
    EXPECT_EQ(r->params, 3);
    EXPECT_EQ(ExpertAt(m, fc2, 1), 0);
    EXPECT_EQ(ExpertAt(m, fc2, 0), grouped ? 64 : 128);
    EXPECT_EQ(ExpertAt(m, fc1, 1), grouped ? 128 : 64);
    EXPECT_EQ(ExpertAt(m, fc1, 0), 192);
  }
  Manifest m = Moe();
  DpBucketArgs a = Args(1, 1);
  a.etp_size = 2;  // 2 expert groups wanted, 1 stored
  Result<DpBucketRebuild> r = RebuildDpBuckets(a, &m);
  ASSERT_TRUE(r.ok());
  EXPECT_THAT(r->not_rebuilt, HasSubstr("1 expert data-parallel groups for "
                                        "expert_tensor_parallel_size 2 x "));
  a = Args(1, 1);
  a.ep_size = 2;  // 2 expert groups wanted, 1 stored
  r = RebuildDpBuckets(a, &m);
  ASSERT_TRUE(r.ok());
  EXPECT_THAT(r->not_rebuilt, HasSubstr("1 expert data-parallel groups for "
                                        "expert_tensor_parallel_size 1 x "
                                        "expert_model_parallel_size 2"));
  std::erase_if(m.tensors, [](const TensorRecord& t) {
    return t.key.find("experts") != t.key.npos && t.key[0] == 'd';
  });
  r = RebuildDpBuckets(Args(1, 1), &m);  // chained_1 without experts
  ASSERT_TRUE(r.ok());
  EXPECT_THAT(r->not_rebuilt, HasSubstr("chained_1. buckets but no expert parameters"));
}

// A Qwen/DeepSeek-style MoE layer: Moe()'s experts (chained_1) and, in the
// dense optimizer, the router [1, 2, 2] with its bias [1, 2], its
// expert_bias buffer [1, 2] (in no buffer) and the shared experts. Model
// order: router.weight, router.bias, then SharedExpertMLP's own gate_weight
// [1, 1, 2] before its linear_fc1 [1, 4, 2] and linear_fc2 [1, 2, 2].
// Reverse, 64-aligned: fc2 at 0, fc1 at 64, gate_weight at 128, the
// router's bias at 192, its weight at 256 (260 elements).
TEST(DpBucketsTest, SharedExpertsAreInTheDenseBufferAfterTheRouter) {
  Manifest m = Moe();
  std::erase_if(m.tensors, [](const TensorRecord& t) {
    return t.key.rfind("chained_0.", 0) == 0 || t.key[0] == 'e';
  });
  const std::string l = "decoder.layers.mlp.";
  for (const auto& [k, shape] : std::vector<std::pair<std::string, Shape>>{
           {"router.weight", {1, 2, 2}},
           {"router.bias", {1, 2}},
           {"router.expert_bias", {1, 2}},
           {"shared_experts.gate_weight", {1, 1, 2}},
           {"shared_experts.linear_fc1.weight", {1, 4, 2}},
           {"shared_experts.linear_fc2.weight", {1, 2, 2}}}) {
    m.tensors.push_back(Model(l + k, shape, true));
  }
  TensorRecord b = Bucket(0, "exp_avg", 260, {});
  b.key = "chained_0." + b.key;
  b.chunks[0].file = 0;
  m.tensors.push_back(b);
  std::sort(m.tensors.begin(), m.tensors.end(),
            [](const TensorRecord& a, const TensorRecord& b) { return a.key < b.key; });
  Result<DpBucketRebuild> r = RebuildDpBuckets(Args(1, 1), &m);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->not_rebuilt, "");
  EXPECT_EQ(r->params, 7);  // 5 dense parameters, 2 experts keys; no expert_bias state
  EXPECT_LT(m.FindTensor("optimizer.state.exp_avg." + l + "router.expert_bias"), 0);
  const std::pair<uint32_t, int64_t> at[] = {{0, 0}, {0, 64}, {0, 128}, {0, 192}, {0, 256}};
  const char* keys[] = {"shared_experts.linear_fc2.weight", "shared_experts.linear_fc1.weight",
                        "shared_experts.gate_weight", "router.bias", "router.weight"};
  for (int i = 0; i < 5; ++i) {
    const Shape origin(m.tensors[m.FindTensor(l + keys[i])].shape.size(), 0);
    EXPECT_EQ(StateAt(m, l + keys[i], origin), at[i]) << keys[i];
  }
}

// Expert TP 2 (TP 1, EP 1): expert groups 0 and 1 are expert TP ranks 0 and
// 1, each holding its shard of every expert: fc1 [1, 2, 4, 1] as SwiGLU
// blocks (rank t: rows t and 2 + t), fc2 [1, 2, 1, 2] split on its last dim.
// TEGroupedMLP order reversed: fc2 e1 at 0, fc2 e0 at 64, fc1 e1 at 128, fc1
// e0 at 192 (194 elements in each group's bucket).
TEST(DpBucketsTest, ExpertTensorParallelGroupsHoldTheirShardOfEachExpert) {
  Manifest m = Moe();
  std::erase_if(m.tensors, [](const TensorRecord& t) {  // Moe()'s experts and their buckets
    return t.key.rfind("decoder.", 0) == 0 || t.key.rfind("chained_1.", 0) == 0;
  });
  TensorRecord fc1{"decoder.layers.mlp.experts.linear_fc1.weight", DType::kF32, {1, 2, 4, 1}, {}};
  TensorRecord fc2{"decoder.layers.mlp.experts.linear_fc2.weight", DType::kF32, {1, 2, 1, 2}, {}};
  auto chunk = [](Shape offset) {
    ChunkRecord c;
    c.box = Box{std::move(offset), {1, 1, 1, 1}};
    return c;
  };
  for (int64_t e = 0; e < 2; ++e) {
    for (int64_t j = 0; j < 4; ++j) fc1.chunks.push_back(chunk({0, e, j, 0}));
    for (int64_t j = 0; j < 2; ++j) fc2.chunks.push_back(chunk({0, e, 0, j}));
  }
  m.tensors.push_back(fc1);
  m.tensors.push_back(fc2);
  for (int g = 0; g < 2; ++g) {
    TensorRecord b = Bucket(0, "exp_avg", 194, {}, g);
    b.key = "chained_1." + b.key;
    b.chunks[0].file = 1 + static_cast<uint32_t>(g);
    m.tensors.push_back(b);
  }
  std::sort(m.tensors.begin(), m.tensors.end(),
            [](const TensorRecord& a, const TensorRecord& b) { return a.key < b.key; });
  DpBucketArgs a = Args(1, 1);
  a.etp_size = 2;
  a.grouped_gemm = true;
  Result<DpBucketRebuild> r = RebuildDpBuckets(a, &m);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->not_rebuilt, "");
  for (uint32_t t = 0; t < 2; ++t) {
    const int64_t tt = t;
    EXPECT_EQ(StateAt(m, fc1.key, {0, 0, tt, 0}), std::make_pair(1 + t, int64_t{192}));
    EXPECT_EQ(StateAt(m, fc1.key, {0, 0, 2 + tt, 0}), std::make_pair(1 + t, int64_t{193}));
    EXPECT_EQ(StateAt(m, fc1.key, {0, 1, 2 + tt, 0}), std::make_pair(1 + t, int64_t{129}));
    EXPECT_EQ(StateAt(m, fc2.key, {0, 0, 0, tt}), std::make_pair(1 + t, int64_t{64}));
    EXPECT_EQ(StateAt(m, fc2.key, {0, 1, 0, tt}), std::make_pair(1 + t, int64_t{0}));
  }
  a.etp_size = 1;  // 2 expert groups but expert TP 1: each expert is stored in 2 / 4 chunks
  r = RebuildDpBuckets(a, &m);
  ASSERT_TRUE(r.ok());
  EXPECT_THAT(r->not_rebuilt, HasSubstr("expert_tensor_parallel_size 1 x"));
}

// EP 1 with expert TP = TP: one optimizer (no chained_ prefix), the experts
// in the dense buffer at the experts module's place, after the router
// (none here), in TEGroupedMLP order: reversed, fc2 e1 at 0, fc2 e0 at 64,
// fc1 e1 at 128, fc1 e0 at 192, the embedding [3, 2] at 256.
TEST(DpBucketsTest, ExpertsInTheDenseBufferWithEp1AndExpertTpAsTp) {
  Manifest m = Moe();
  std::erase_if(m.tensors, [](const TensorRecord& t) { return t.key.rfind("chained_", 0) == 0; });
  m.tensors.push_back(Bucket(0, "exp_avg", 262, {}));
  std::sort(m.tensors.begin(), m.tensors.end(),
            [](const TensorRecord& a, const TensorRecord& b) { return a.key < b.key; });
  DpBucketArgs a = Args(1, 1);
  a.grouped_gemm = true;
  Result<DpBucketRebuild> r = RebuildDpBuckets(a, &m);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->not_rebuilt, "");
  const std::string fc1 = "decoder.layers.mlp.experts.linear_fc1.weight";
  const std::string fc2 = "decoder.layers.mlp.experts.linear_fc2.weight";
  EXPECT_EQ(ExpertAt(m, fc2, 1), 0);
  EXPECT_EQ(ExpertAt(m, fc2, 0), 64);
  EXPECT_EQ(ExpertAt(m, fc1, 1), 128);
  EXPECT_EQ(ExpertAt(m, fc1, 0), 192);
  EXPECT_EQ(StateAt(m, "embedding.word_embeddings.weight", {0, 0}),
            std::make_pair(0u, int64_t{256}));
  a.ep_size = 2;  // EP 2 keeps them apart: no chained_1. is a layout Megatron does not write
  r = RebuildDpBuckets(a, &m);
  ASSERT_TRUE(r.ok());
  EXPECT_THAT(r->not_rebuilt, HasSubstr("expert_model_parallel_size 2 and "
                                        "expert_tensor_parallel_size 1 (Megatron keeps experts "
                                        "in the dense buffers only"));
}

TEST(DpBucketsTest, AParameterPastABucketEndIsDataLossNamingTheBucket) {
  Manifest m = TwoBuckets(68);  // fc2 layer 1 needs [64, 70)
  Result<DpBucketRebuild> r = RebuildDpBuckets(Args(1, 1), &m);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
  EXPECT_THAT(r.status().message(), HasSubstr("bucket_idx_0."));
  EXPECT_THAT(r.status().message(), HasSubstr("linear_fc2.weight' layer 1 would occupy [64, 70)"));
  EXPECT_THAT(r.status().message(), HasSubstr("do not tile"));
}

TEST(DpBucketsTest, ParametersLeftOverOrBucketsLeftOverAreDataLoss) {
  Manifest m = TwoBuckets();
  std::erase_if(m.tensors, [](const TensorRecord& t) {
    return t.key.find("bucket_idx_1") != std::string::npos;
  });
  Result<DpBucketRebuild> r = RebuildDpBuckets(Args(1, 1), &m);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
  EXPECT_THAT(r.status().message(), HasSubstr("bucket_idx_0."));
  EXPECT_THAT(r.status().message(), HasSubstr("is the last"));

  m = TwoBuckets();  // a third bucket no parameter reaches
  m.tensors.push_back(Bucket(2, "param", 8, {}));
  m.tensors.push_back(Bucket(2, "exp_avg", 8, {}));
  std::sort(m.tensors.begin(), m.tensors.end(),
            [](const TensorRecord& a, const TensorRecord& b) { return a.key < b.key; });
  r = RebuildDpBuckets(Args(1, 1), &m);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
  EXPECT_THAT(r.status().message(), HasSubstr("and buckets follow"));
}

TEST(DpBucketsTest, ARangeTheBucketsChunksDoNotCoverIsDataLoss) {
  Manifest m = TwoBuckets(70, /*cover=*/false);  // bucket 0 stores [0, 66) only
  Result<DpBucketRebuild> r = RebuildDpBuckets(Args(1, 1), &m);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
  EXPECT_THAT(r.status().message(), HasSubstr("bucket_idx_0."));
  EXPECT_THAT(r.status().message(), HasSubstr("[64, 70) is not wholly stored (2 of 6"));
}

TEST(DpBucketsTest, LayoutsNotDerivedAreLeftAsStoredWithTheReason) {
  const Manifest before = TwoBuckets();
  Manifest m = before;
  m.tensors.insert(m.tensors.begin(), Model("a.custom.weight", {4}, false));
  Result<DpBucketRebuild> r = RebuildDpBuckets(Args(1, 1), &m);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_THAT(r->not_rebuilt, HasSubstr("'a.custom.weight' is not a parameter"));
  EXPECT_EQ(r->params, 0);
  EXPECT_EQ(m.tensors.size(), before.tensors.size() + 1);

  m = before;
  r = RebuildDpBuckets(Args(1, 2), &m);
  ASSERT_TRUE(r.ok());
  EXPECT_THAT(r->not_rebuilt, HasSubstr("pipeline_model_parallel_size 2"));
  r = RebuildDpBuckets(Args(2, 1), &m);
  ASSERT_TRUE(r.ok());
  EXPECT_THAT(r->not_rebuilt, HasSubstr("1 data-parallel groups for tensor_model_parallel_size 2"));
  r = RebuildDpBuckets(Args(0, 1), &m);
  ASSERT_TRUE(r.ok());
  EXPECT_THAT(r->not_rebuilt, HasSubstr("no tensor_model_parallel_size"));
  EXPECT_EQ(m.tensors.size(), before.tensors.size());
}

TEST(DpBucketsTest, ArgsComeFromCommonPtsNamespace) {
  DpBucketArgs a = DpBucketArgsFromCommon(
      R"({"iteration": 3, "args": {"__class__": "argparse.Namespace", "state":
          {"tensor_model_parallel_size": 4, "pipeline_model_parallel_size": 2}}})");
  EXPECT_EQ(a.tp_size, 4);
  EXPECT_EQ(a.pp_size, 2);
  EXPECT_EQ(a.not_derived, "");
  EXPECT_FALSE(a.tied);  // untie_embeddings_and_output_weights absent
  a = DpBucketArgsFromCommon("");
  EXPECT_EQ(a.tp_size, 0);
  EXPECT_EQ(a.pp_size, 1);
  a = DpBucketArgsFromCommon(
      R"({"args": {"state": {"tensor_model_parallel_size": 1, "pipeline_model_parallel_size": 4,
          "num_layers": 10, "decoder_first_pipeline_num_layers": 1,
          "decoder_last_pipeline_num_layers": null, "untie_embeddings_and_output_weights": false,
          "virtual_pipeline_model_parallel_size": null, "pipeline_model_parallel_layout": null,
          "account_for_embedding_in_pipeline_split": false, "expert_model_parallel_size": 2,
          "expert_tensor_parallel_size": 1, "moe_grouped_gemm": true}}})");
  EXPECT_EQ(a.ep_size, 2);
  EXPECT_EQ(a.etp_size, 1);
  EXPECT_TRUE(a.grouped_gemm);
  EXPECT_EQ(a.num_layers, 10);
  EXPECT_EQ(a.first_stage_layers, 1);
  EXPECT_EQ(a.last_stage_layers, -1);
  EXPECT_TRUE(a.tied);
  EXPECT_EQ(a.not_derived, "");
  a = DpBucketArgsFromCommon(
      R"({"args": {"state": {"pipeline_model_parallel_size": 2,
          "virtual_pipeline_model_parallel_size": 2}}})");
  EXPECT_EQ(a.vpp_size, 2);
  EXPECT_EQ(a.not_derived, "");
  a = DpBucketArgsFromCommon(  // arguments.py: V = (8 / 2) / 1
      R"({"args": {"state": {"pipeline_model_parallel_size": 2, "num_layers": 8,
          "num_layers_per_virtual_pipeline_stage": 1}}})");
  EXPECT_EQ(a.vpp_size, 4);
  a = DpBucketArgsFromCommon(
      R"({"args": {"state": {"pipeline_model_parallel_size": 2,
          "pipeline_model_parallel_layout": "Et|tL"}}})");
  EXPECT_THAT(a.not_derived, HasSubstr("pipeline_model_parallel_layout is set"));
}

// get_transformer_layer_offset's interleaved split; Megatron's own example:
// 8 layers, 2 stages, 2 chunks: stage 0 [0, 1] [4, 5], stage 1 [2, 3] [6, 7].
TEST(DpBucketsTest, ModelChunksSplitTheLayersAsMegatronsInterleavedSchedule) {
  std::string why;
  DpBucketArgs a = Args(1, 2);
  a.vpp_size = 2;
  EXPECT_EQ(ChunkLayers(a, 8, &why), (std::vector<LayerRange>{{0, 2}, {4, 6}, {2, 4}, {6, 8}}));
  a.vpp_size = 4;  // stage 0 [0] [2] [4] [6], stage 1 [1] [3] [5] [7]
  EXPECT_EQ(
      ChunkLayers(a, 8, &why),
      (std::vector<LayerRange>{{0, 1}, {2, 3}, {4, 5}, {6, 7}, {1, 2}, {3, 4}, {5, 6}, {7, 8}}));
  a = Args(1, 3);  // uneven: 2 | 6 | 2 layers, chunks of 1 | 3 | 1
  a.vpp_size = 2;
  a.first_stage_layers = a.last_stage_layers = 2;
  EXPECT_EQ(ChunkLayers(a, 10, &why),
            (std::vector<LayerRange>{{0, 1}, {5, 6}, {1, 4}, {6, 9}, {4, 5}, {9, 10}}));
  EXPECT_EQ(why, "");
  a.first_stage_layers = 3;  // 3 | 5 | 2: 3 does not split in 2
  EXPECT_TRUE(ChunkLayers(a, 10, &why).empty());
  EXPECT_THAT(why, HasSubstr("stage 0's 3 layers do not split into "
                             "virtual_pipeline_model_parallel_size 2"));
  a = Args(1, 1);
  EXPECT_EQ(ChunkLayers(a, 3, &why), (std::vector<LayerRange>{{0, 3}}));
}

// Megatron-Core's get_num_layers_to_build: even, or the first / last
// stage's own count and the rest even.
TEST(DpBucketsTest, StageBoundsSplitTheLayersAsMegatronDoes) {
  std::string why;
  DpBucketArgs a = Args(1, 4);
  EXPECT_EQ(StageBounds(a, 8, &why), (std::vector<int64_t>{0, 2, 4, 6, 8}));
  a.first_stage_layers = 1;
  a.last_stage_layers = 3;
  EXPECT_EQ(StageBounds(a, 8, &why), (std::vector<int64_t>{0, 1, 3, 5, 8}));
  a.last_stage_layers = -1;
  EXPECT_EQ(StageBounds(a, 10, &why), (std::vector<int64_t>{0, 1, 4, 7, 10}));
  EXPECT_EQ(why, "");
  EXPECT_TRUE(StageBounds(a, 9, &why).empty());
  EXPECT_THAT(why, HasSubstr("9 layers do not split over pipeline_model_parallel_size 4"));
  EXPECT_EQ(StageBounds(Args(2, 1), 3, &why), (std::vector<int64_t>{0, 3}));
}

}  // namespace
}  // namespace shardpoint::internal_dcp
