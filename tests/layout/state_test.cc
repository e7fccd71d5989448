// Objects in the field's vocabulary, composing owners' states, partial loads,
// conflicting replica claims, and the edge cases of issue 3: zero-element
// tensors, 0-d scalars, ranks that hold nothing of a tensor, per-rank RNG
// states, and a setting restored on ranks that did not write it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "shardpoint/layout.h"
#include "shardpoint/layout_megatron.h"
#include "shardpoint/layout_state.h"
#include "tests/testing/ranks.h"
#include "tests/testing/reference.h"

namespace shardpoint {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<std::string> TensorKeys(const State& s) {
  std::vector<std::string> out;
  for (const LocalTensor& t : s.tensors) {
    for (const Segment& seg : t.segments) out.push_back(seg.key);
  }
  return out;
}

std::vector<std::string> ObjectKeys(const State& s) {
  std::vector<std::string> out;
  for (const Object& o : s.objects) out.push_back(o.key);
  return out;
}

class StateTest : public ::testing::Test {
 protected:
  SaveOptions Saving() {
    SaveOptions o;
    o.storage = mem_.get();
    return o;
  }
  LoadOptions Loading() {
    LoadOptions o;
    o.storage = mem_.get();
    return o;
  }
  // A whole tensor `key` of `shape` with memory from `rank`.
  static LocalTensor Whole(testing::TestRank& rank, const std::string& key, const Shape& shape,
                           DType dtype = DType::kF32) {
    return WholeTensor(key, dtype, rank.arena.Alloc(Box::Whole(shape).num_elements(), dtype),
                       shape);
  }
  std::unique_ptr<Storage> mem_ = NewMemStorage();
};

TEST(ObjectsTest, Builders) {
  Object e = ExtraStateObject("l.0._extra_state", "te");
  EXPECT_EQ(e.key, "l.0._extra_state");
  EXPECT_EQ(e.bytes, "te");
  EXPECT_TRUE(e.index.empty() && e.grid.empty());
  Object r = RngStateObject("rng", "abc", 3, 8);
  EXPECT_EQ(r.index, (Shape{3}));
  EXPECT_EQ(r.grid, (Shape{8}));
  Object s = ShardedObject("te_tp", "x", {1, 0}, {2, 2});
  EXPECT_EQ(s.index, (Shape{1, 0}));
  Object set = SettingObject("optimizer.param_state_sharding_type", "dp_zero_gather_scatter");
  EXPECT_EQ(set.bytes, "dp_zero_gather_scatter");
  EXPECT_TRUE(set.grid.empty());
  EXPECT_TRUE(IsExtraStateKey("_extra_state"));
  EXPECT_TRUE(IsExtraStateKey("decoder.layers.0.mlp.linear_fc1._extra_state"));
  EXPECT_FALSE(IsExtraStateKey("decoder.layers.0.mlp.linear_fc1.my_extra_state"));
  EXPECT_FALSE(IsExtraStateKey("_extra_state.weight"));
}

TEST(ObjectsTest, DropKeysAndPrefix) {
  State s;
  s.tensors.push_back(WholeTensor("a.weight", DType::kF32, nullptr, {2}));
  s.tensors.push_back(WholeTensor("a._extra_state", DType::kU8, nullptr, {4}));
  s.objects.push_back(ExtraStateObject("b._extra_state", "x"));
  s.objects.push_back(SettingObject("setting", "y"));
  EXPECT_EQ(DropKeys(&s, IsExtraStateKey), 2u);
  EXPECT_THAT(TensorKeys(s), ElementsAre("a.weight"));
  EXPECT_THAT(ObjectKeys(s), ElementsAre("setting"));
  AddKeyPrefix(&s, "model.");
  EXPECT_THAT(TensorKeys(s), ElementsAre("model.a.weight"));
  EXPECT_THAT(ObjectKeys(s), ElementsAre("model.setting"));
}

// Regression (b): two optimizer sub-state-dicts (e.g. a dense and an expert
// optimizer) with identical inner keys are never silently written over one
// another: merged without prefixes they are rejected naming both owners;
// with prefixes both are saved and both come back.
TEST_F(StateTest, RegressionOptimizerSubStatesWithIdenticalKeys) {
  testing::TestRank rank;
  auto sub = [&](const std::string& step) {
    State s;
    s.tensors.push_back(Whole(rank, "state.0.exp_avg", {4}));
    s.objects.push_back(SettingObject("param_groups", step));
    return s;
  };
  std::vector<std::pair<std::string, State>> owners = {{"dense_optimizer", sub("lr=1")},
                                                       {"expert_optimizer", sub("lr=2")}};
  Result<State> bad = MergeStates(owners, false);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(),
              HasSubstr("key 'param_groups' is held by both 'dense_optimizer' and "
                        "'expert_optimizer'"));
  // A tensor key alone also collides.
  owners[0].second.objects.clear();
  EXPECT_THAT(MergeStates(owners, false).status().message(),
              HasSubstr("key 'state.0.exp_avg' is held by both 'dense_optimizer' and "
                        "'expert_optimizer'"));
  owners[0].second.objects.push_back(SettingObject("param_groups", "lr=1"));

  Result<State> merged = MergeStates(owners, true);
  ASSERT_TRUE(merged.ok()) << merged.status().ToString();
  EXPECT_THAT(TensorKeys(*merged),
              ElementsAre("dense_optimizer.state.0.exp_avg", "expert_optimizer.state.0.exp_avg"));
  testing::RefModel ref;
  ref["dense_optimizer.state.0.exp_avg"] = testing::RandomRefTensor(DType::kF32, {4}, 1);
  ref["expert_optimizer.state.0.exp_avg"] = testing::RandomRefTensor(DType::kF32, {4}, 2);
  ASSERT_TRUE(testing::FillFromReference(ref, merged->tensors).ok());
  ASSERT_TRUE(testing::SaveRanks({&*merged}, "/c", Saving()).ok());

  testing::TestRank back;
  State want;
  want.tensors = {Whole(back, "dense_optimizer.state.0.exp_avg", {4}),
                  Whole(back, "expert_optimizer.state.0.exp_avg", {4})};
  want.objects = {SettingObject("dense_optimizer.param_groups", ""),
                  SettingObject("expert_optimizer.param_groups", "")};
  ASSERT_TRUE(testing::LoadRanks({&want}, "/c", Loading()).ok());
  EXPECT_TRUE(testing::CheckAgainstReference(ref, want.tensors).ok());
  EXPECT_EQ(want.objects[0].bytes, "lr=1");
  EXPECT_EQ(want.objects[1].bytes, "lr=2");
}

// Regression (f): a load that skips `_extra_state` (TransformerEngine's
// per-module bytes) and asks for a key the checkpoint lacks: with
// allow_missing_keys and allow_unexpected_keys it succeeds and returns both
// lists; without, it names the keys.
TEST_F(StateTest, RegressionPartialLoadSkipsExtraState) {
  testing::TestRank src;
  src.state.tensors.push_back(Whole(src, "layer.0.fc1.weight", {2, 2}));
  src.state.tensors.push_back(Whole(src, "layer.0.fc1._extra_state", {3}, DType::kU8));
  src.state.objects.push_back(ExtraStateObject("layer.0.fc2._extra_state", "te-fp8-meta"));
  testing::RefModel ref;
  ref["layer.0.fc1.weight"] = testing::RandomRefTensor(DType::kF32, {2, 2}, 4);
  ref["layer.0.fc1._extra_state"] = testing::RandomRefTensor(DType::kU8, {3}, 5);
  ASSERT_TRUE(testing::FillFromReference(ref, src.state.tensors).ok());
  ASSERT_TRUE(testing::SaveRanks({&src.state}, "/c", Saving()).ok());

  // Two ranks ask for the same model; neither keeps the extra state, rank 1
  // also asks for a parameter the checkpoint does not have.
  std::vector<testing::TestRank> dst(2);
  for (int r = 0; r < 2; ++r) {
    dst[r].state.tensors.push_back(Whole(dst[r], "layer.0.fc1.weight", {2, 2}));
    dst[r].state.tensors.push_back(Whole(dst[r], "layer.0.fc1._extra_state", {3}, DType::kU8));
    dst[r].state.objects.push_back(ExtraStateObject("layer.0.fc2._extra_state", ""));
    EXPECT_EQ(DropKeys(&dst[r].state, IsExtraStateKey), 2u);
  }
  dst[1].state.tensors.push_back(Whole(dst[1], "layer.0.new_bias", {2}));
  Status strict = testing::LoadRanks(testing::StatesOf(dst), "/c", Loading());
  EXPECT_EQ(strict.code(), StatusCode::kNotFound);
  EXPECT_THAT(strict.message(), HasSubstr("'layer.0.new_bias'"));
  LoadOptions o = Loading();
  o.allow_missing_keys = true;
  strict = testing::LoadRanks(testing::StatesOf(dst), "/c", o);
  EXPECT_THAT(strict.message(),
              HasSubstr("'layer.0.fc1._extra_state', 'layer.0.fc2._extra_state'"));
  o.allow_unexpected_keys = true;
  std::vector<LoadResult> results;
  Status s = testing::LoadRanks(testing::StatesOf(dst), "/c", o, &results);
  ASSERT_TRUE(s.ok()) << s.ToString();
  for (int r = 0; r < 2; ++r) {
    EXPECT_THAT(results[r].unexpected_keys,
                ElementsAre("layer.0.fc1._extra_state", "layer.0.fc2._extra_state"));
    Status c = testing::CheckAgainstReference(ref, {dst[r].state.tensors[0]});
    EXPECT_TRUE(c.ok()) << c.ToString();
  }
  EXPECT_TRUE(results[0].missing_keys.empty());
  EXPECT_THAT(results[1].missing_keys, ElementsAre("layer.0.new_bias"));
}

// Regression (c): two TP ranks that both claim to be the primary replica of
// one key's box while holding different data (e.g. a TP split forgotten on
// one side). The planner treats identical boxes as replicas; the default
// SaveOptions::verify_replicas (a checksum per replica) rejects the save. Two
// claims that overlap without being identical are always rejected.
TEST_F(StateTest, RegressionTwoTpRanksClaimOneBoxWithDifferentData) {
  std::vector<testing::TestRank> ranks(2);
  for (int r = 0; r < 2; ++r) {
    LocalTensor t = Whole(ranks[r], "fc1.weight", {4, 2});
    static_cast<float*>(t.data)[0] = static_cast<float>(r);  // the data differs
    ranks[r].state.tensors.push_back(t);
  }
  Status s = testing::SaveRanks(testing::StatesOf(ranks), "/verified", Saving());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("tensor 'fc1.weight' box [0:4, 0:2]: rank "));
  EXPECT_THAT(s.message(), HasSubstr("must hold identical replicas"));
  EXPECT_FALSE(*mem_->Exists("/verified/manifest"));
  // Turned off, the claims are indistinguishable from replicas (the
  // documented trade-off): one copy is stored.
  SaveOptions unchecked = Saving();
  unchecked.verify_replicas = false;
  EXPECT_TRUE(testing::SaveRanks(testing::StatesOf(ranks), "/unverified", unchecked).ok());

  // Overlapping, not identical: rank 0 claims rows 0..2, rank 1 rows 2..3.
  std::vector<testing::TestRank> overlap(2);
  overlap[0].state.tensors.push_back(*SplitTensorSizes(
      "fc1.weight", DType::kF32, overlap[0].arena.Alloc(6, DType::kF32), {4, 2}, 0, {3, 1}, 0));
  LocalTensor rows23 = *ColumnParallel("fc1.weight", DType::kF32,
                                       overlap[1].arena.Alloc(4, DType::kF32), {4, 2}, 1, 2);
  overlap[1].state.tensors.push_back(rows23);
  s = testing::SaveRanks(testing::StatesOf(overlap), "/overlap", Saving());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("box [0:3, 0:2] (rank 0) partially overlaps box "
                                     "[2:4, 0:2] (rank 1)"));
}

// Zero-element tensors are declared and stored as shape only: saved by
// ranks that hold nothing, loaded without error, never a missing key.
TEST_F(StateTest, ZeroElementTensorsAndScalars) {
  std::vector<testing::TestRank> src(3);
  testing::RefModel ref;
  ref["empty"] = testing::RandomRefTensor(DType::kBF16, {0, 5}, 1);
  ref["step"] = testing::RandomRefTensor(DType::kI64, {}, 2);
  ref["loss_scale"] = testing::RandomRefTensor(DType::kF32, {}, 3);
  ref["w"] = testing::RandomRefTensor(DType::kF32, {2, 3}, 4);
  for (int r = 0; r < 3; ++r) {
    // Every rank: the empty tensor (its TP shard is empty too) and the
    // 0-d step (replicated).
    src[r].state.tensors.push_back(*ColumnParallel("empty", DType::kBF16, nullptr, {0, 5}, r, 3));
    src[r].state.tensors.push_back(Whole(src[r], "step", {}, DType::kI64));
    // w over 3 TP ranks: torch.chunk(2, 3) leaves rank 2 with nothing.
    LocalTensor w = *ColumnParallel("w", DType::kF32, nullptr, {2, 3}, r, 3);
    w.data = src[r].arena.Alloc(Box::Whole(w.shape).num_elements(), DType::kF32);
    src[r].state.tensors.push_back(w);
  }
  src[0].state.tensors.push_back(Whole(src[0], "loss_scale", {}));
  EXPECT_EQ(src[2].state.tensors[2].shape, (Shape{0, 3}));
  for (testing::TestRank& r : src) {
    ASSERT_TRUE(testing::FillFromReference(ref, r.state.tensors).ok());
  }
  Status s = testing::SaveRanks(testing::StatesOf(src), "/c", Saving());
  ASSERT_TRUE(s.ok()) << s.ToString();
  // Back into 2 ranks: rank 1 holds nothing of "w" (an empty flat range) and
  // only rank 0 asks for the scalars.
  std::vector<testing::TestRank> dst(2);
  for (int r = 0; r < 2; ++r) {
    dst[r].state.tensors.push_back(Whole(dst[r], "empty", {0, 5}, DType::kBF16));
    LocalTensor w =
        *FlatShard(WholeTensor("w", DType::kF32, nullptr, {2, 3}),
                   r == 0 ? FlatRange{0, 6} : FlatRange{6, 6}, dst[r].arena.Alloc(6, DType::kF32));
    dst[r].state.tensors.push_back(w);
  }
  dst[0].state.tensors.push_back(Whole(dst[0], "step", {}, DType::kI64));
  dst[0].state.tensors.push_back(Whole(dst[0], "loss_scale", {}));
  std::vector<LoadResult> results;
  s = testing::LoadRanks(testing::StatesOf(dst), "/c", Loading(), &results);
  ASSERT_TRUE(s.ok()) << s.ToString();
  for (int r = 0; r < 2; ++r) {
    Status c = testing::CheckAgainstReference(ref, dst[r].state.tensors);
    EXPECT_TRUE(c.ok()) << c.ToString();
    EXPECT_TRUE(results[r].missing_keys.empty());
    EXPECT_TRUE(results[r].unexpected_keys.empty());
  }
}

// Per-rank RNG states are a grid of objects: every rank gets its own back
// under the same world size; under another world size the new ranks ask
// for the coordinates they map to (here: rank r of 2 takes old rank 2r's).
// A string setting written by rank 0 only is restored on every rank.
TEST_F(StateTest, RngStatesAndASettingRestoredOnOtherRanks) {
  std::vector<testing::TestRank> src(4);
  for (int r = 0; r < 4; ++r) {
    src[r].state.objects.push_back(RngStateObject("rng_state", "rng-" + std::to_string(r), r, 4));
    // TransformerEngine state that differs per TP rank (tp = r % 2).
    src[r].state.objects.push_back(
        ShardedObject("te_tp_state", "tp" + std::to_string(r % 2), {r % 2}, {2}));
  }
  src[0].state.objects.push_back(
      SettingObject("optimizer.param_state_sharding_type", "fully_sharded_model_space"));
  ASSERT_TRUE(testing::SaveRanks(testing::StatesOf(src), "/c", Saving()).ok());

  std::vector<testing::TestRank> same(4);
  for (int r = 0; r < 4; ++r) {
    same[r].state.objects = {RngStateObject("rng_state", "", r, 4),
                             ShardedObject("te_tp_state", "", {r % 2}, {2}),
                             SettingObject("optimizer.param_state_sharding_type", "")};
  }
  Status s = testing::LoadRanks(testing::StatesOf(same), "/c", Loading());
  ASSERT_TRUE(s.ok()) << s.ToString();
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(same[r].state.objects[0].bytes, "rng-" + std::to_string(r));
    EXPECT_EQ(same[r].state.objects[1].bytes, "tp" + std::to_string(r % 2));
    EXPECT_EQ(same[r].state.objects[2].bytes, "fully_sharded_model_space");
  }
  std::vector<testing::TestRank> fewer(2);
  for (int r = 0; r < 2; ++r) {
    fewer[r].state.objects = {RngStateObject("rng_state", "", 2 * r, 4),
                              SettingObject("optimizer.param_state_sharding_type", "")};
  }
  std::vector<LoadResult> results;
  LoadOptions o = Loading();
  o.allow_unexpected_keys = true;
  s = testing::LoadRanks(testing::StatesOf(fewer), "/c", o, &results);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(fewer[1].state.objects[0].bytes, "rng-2");
  EXPECT_EQ(fewer[1].state.objects[1].bytes, "fully_sharded_model_space");
  // Unexpected keys are reported per key: asking for any coordinate of
  // "rng_state" counts as asking for the key.
  EXPECT_THAT(results[0].unexpected_keys, ElementsAre("te_tp_state"));
  // A grid coordinate that was never saved is a missing key.
  fewer[0].state.objects = {RngStateObject("rng_state", "", 5, 8)};
  s = testing::LoadRanks({&fewer[0].state}, "/c", o);
  EXPECT_FALSE(s.ok());
}

}  // namespace
}  // namespace shardpoint
