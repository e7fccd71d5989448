// PlaceInHf on the dp_reshardable fixture (tests/dcp/fixtures/
// megatron_dpr_torch_dist): model keys and rebuilt optimizer-state keys get
// the same pieces, the state named; the buckets (skipped by the mapping) none.
#include <gtest/gtest.h>

#include <filesystem>

#include "shardpoint/hf_placement.h"
#include "shardpoint/hf_rules.h"
#include "shardpoint/storage.h"

namespace shardpoint {
namespace {

std::string Fixture() {
  std::string f = __FILE__;
  std::string dir =
      f.substr(0, f.rfind("/src/convert/")) + "/tests/dcp/fixtures/megatron_dpr_torch_dist";
  Result<bool> here = DefaultStorage()->Exists(dir + "/.metadata");
  if (!here.ok() || !*here) dir = "tests/dcp/fixtures/megatron_dpr_torch_dist";
  return std::filesystem::absolute(dir).string();
}

TEST(HfPlacementTest, OptimizerStateKeysArePlacedAsTheirParameterWithTheStateNamed) {
  Result<HfMapping> m = ShippedHfMapping("megatron_llama");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  HfOptions o;
  // The fixture's linear_qkv [2, 8, 4]: (2 heads + 2 * 1 group) * head_dim 2.
  o.variables = {{"num_attention_heads", 2}, {"num_key_value_heads", 1}};
  Result<std::vector<HfPlacement>> r = PlaceInHf(Fixture(), *m, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  int k_proj = 0;
  for (const HfPlacement& p : *r) {
    EXPECT_EQ(p.key.find("optimizer.distributed."), std::string::npos) << p.key;
    if (p.hf != "model.layers.1.self_attn.k_proj.weight") continue;
    ++k_proj;
    const std::string stored = p.state.empty() ? "" : "optimizer.state." + p.state + ".";
    EXPECT_EQ(p.key, stored + "decoder.layers.self_attention.linear_qkv.weight");
    EXPECT_EQ(p.hf_shape, (Shape{2, 4}));
    EXPECT_EQ(p.hf_offset, 0);
    EXPECT_EQ(p.box.offset, (Shape{1, 4, 0}));
    EXPECT_EQ(p.box.shape, (Shape{1, 2, 4}));
  }
  EXPECT_EQ(k_proj, 4);       // the model weight, param, exp_avg, exp_avg_sq
  EXPECT_EQ(r->size(), 84u);  // 21 HF tensors x 4
}

TEST(HfPlacementTest, AKeyTheMappingCannotPlaceIsAnErrorNamingIt) {
  Result<HfMapping> m = ShippedHfMapping("megatron_llama");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  Result<std::vector<HfPlacement>> r = PlaceInHf(Fixture(), *m, {});  // heads 2, groups 2: 8 % 6
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("decoder.layers.self_attention.linear_qkv.weight"),
            std::string::npos)
      << r.status().ToString();
}

}  // namespace
}  // namespace shardpoint
