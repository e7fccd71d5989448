// Megatron torch_dist (tests/dcp/fixtures/megatron_torch_dist, made by
// make_megatron_fixture.py): detected, metadata.json and common.pt rendered
// without instantiating anything, common.pt as the common state, tensors
// loaded resharded bit for bit; malformed metadata.json and common.pt are
// typed errors naming the file.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "shardpoint/checkpoint.h"
#include "shardpoint/comm.h"
#include "shardpoint/layout.h"
#include "shardpoint/layout_flat.h"
#include "shardpoint/layout_state.h"
#include "src/checkpoint/verify_dcp.h"
#include "src/dcp/dcp_dir.h"
#include "src/dcp/torch_dist.h"
#include "src/dcp/zip.h"
#include "src/dcp/zip_writer.h"
#include "src/geometry/flat_range.h"

using shardpoint::internal_dcp::CommonPtToJson;
using shardpoint::internal_dcp::Crc32;
using shardpoint::internal_dcp::DcpIndex;
using shardpoint::internal_dcp::ReadDcpIndex;
using shardpoint::internal_dcp::ZipLayout;

namespace shardpoint {
namespace {

using ::testing::HasSubstr;

std::string Fixture(const std::string& name = "megatron_torch_dist") {
  std::string f = __FILE__;
  std::string dir = f.substr(0, f.rfind("/tests/dcp/")) + "/tests/dcp/fixtures/" + name;
  Result<bool> here = DefaultStorage()->Exists(dir + "/.metadata");
  if (!here.ok() || !*here) dir = "tests/dcp/fixtures/" + name;
  return std::filesystem::absolute(dir).string();
}

std::string Copy(const std::string& name) {
  const std::string dir =
      ::testing::TempDir() + "sp_megatron_" + name + "_" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::copy(Fixture(), dir);
  return dir;
}

TEST(MegatronTorchDistTest, IndexRendersMetadataAndCommonWithClassNames) {
  Result<DcpIndex> idx = ReadDcpIndex(DefaultStorage(), Fixture());
  ASSERT_TRUE(idx.ok()) << idx.status().ToString();
  const std::string& md = idx->m.metadata_json;
  EXPECT_THAT(md, HasSubstr("\"sharded_backend\":\"torch_dist\""));
  EXPECT_THAT(md, HasSubstr("\"iteration\":100"));
  EXPECT_THAT(md, HasSubstr("\"checkpoint_version\":3.0"));
  EXPECT_THAT(md,
              HasSubstr("\"args\":{\"__class__\":\"argparse.Namespace\",\"state\":{"
                        "\"num_layers\":2,\"hidden_size\":4,\"tensor_model_parallel_size\":2}}"));
  EXPECT_THAT(md, HasSubstr("\"opt_param_scheduler\":{\"num_steps\":800,\"max_lr\":0.0003}"));
  Result<std::string> common = DefaultStorage()->ReadFileToString(Fixture() + "/common.pt");
  ASSERT_TRUE(common.ok());
  EXPECT_TRUE(idx->m.has_common);
  EXPECT_EQ(idx->m.common, *common);
  // Megatron's keys, as DCP stored them; ShardedObjects as byte items (torch
  // 1.13's DCP keeps rank 0's only, see the fixture script).
  EXPECT_GE(idx->m.FindTensor("decoder.layers.mlp.linear_fc1.weight"), 0);
  EXPECT_GE(idx->m.FindTensor("optimizer.state.exp_avg.embedding.word_embeddings.weight"), 0);
  ASSERT_EQ(idx->m.objects.size(), 1u);
  EXPECT_EQ(idx->m.objects[0].key, "rng_state/shard_0_2");
}

TEST(MegatronTorchDistTest, LoadsLayerOneAndTheCommonState) {
  // Layer 1 of fc1 (stored split by rows over TP=2), whole: 100 + 3 r + c.
  std::vector<float> fc1(4 * 3);
  State st;
  LocalTensor t;
  t.dtype = DType::kF32;
  t.shape = {1, 4, 3};
  t.data = fc1.data();
  t.segments.push_back(
      {"decoder.layers.mlp.linear_fc1.weight", {2, 4, 3}, Box{{1, 0, 0}, {1, 4, 3}}, {0, 0, 0}});
  st.tensors.push_back(t);
  st.common = std::string();
  std::unique_ptr<Comm> comm = MakeSingleComm();
  LoadOptions o;
  o.allow_unexpected_keys = true;
  Result<LoadResult> r = Load(st, Fixture(), *comm, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  for (int row = 0; row < 4; ++row) {
    for (int c = 0; c < 3; ++c) EXPECT_EQ(fc1[row * 3 + c], 100.0f + 3 * row + c);
  }
  ASSERT_TRUE(st.common.has_value());
  EXPECT_EQ(st.common->substr(0, 4), std::string("PK\x03\x04", 4));
  EXPECT_THAT(st.metadata_json, HasSubstr("megatron_torch_dist"));
}

TEST(MegatronTorchDistTest, MalformedFilesAreTypedErrorsNamingThem) {
  const std::string dir = Copy("bad");
  Result<std::string> common = DefaultStorage()->ReadFileToString(dir + "/common.pt");
  ASSERT_TRUE(common.ok());
  ASSERT_TRUE(DefaultStorage()->WriteStringToFile(dir + "/common.pt", common->substr(0, 100)).ok());
  Result<DcpIndex> idx = ReadDcpIndex(DefaultStorage(), dir);
  ASSERT_FALSE(idx.ok());
  EXPECT_EQ(idx.status().code(), StatusCode::kDataLoss);
  EXPECT_THAT(idx.status().message(), HasSubstr("common.pt"));

  ASSERT_TRUE(DefaultStorage()->WriteStringToFile(dir + "/common.pt", *common).ok());
  ASSERT_TRUE(DefaultStorage()->WriteStringToFile(dir + "/metadata.json", "{\"sharded").ok());
  idx = ReadDcpIndex(DefaultStorage(), dir);
  ASSERT_FALSE(idx.ok());
  EXPECT_EQ(idx.status().code(), StatusCode::kDataLoss);
  EXPECT_THAT(idx.status().message(), HasSubstr("metadata.json"));

  ASSERT_TRUE(DefaultStorage()
                  ->WriteStringToFile(dir + "/metadata.json", "{\"sharded_backend\": \"zarr\"}")
                  .ok());
  idx = ReadDcpIndex(DefaultStorage(), dir);
  ASSERT_FALSE(idx.ok());
  EXPECT_EQ(idx.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(idx.status().message(), HasSubstr("sharded_backend 'zarr'"));
  std::filesystem::remove_all(dir);
}

// The distributed optimizer's `fully_sharded_model_space` state
// (make_megatron_fixture.py --fsms: Megatron-Core < 0.15 setting mcore_data on
// torch's Metadata, and 0.15's MCoreMetadata class): each state of each
// parameter was stored N-D flattened ([blocks..., block numel], DP ranks
// holding flat ranges of a TP shard, split mid-row; a stacked layer axis; a
// SwiGLU weight in 4 blocks). The index shows it in
// the parameter's shape, every element right (10000 (state + 1) + 1000 param
// + flat index), verify finds the rebuilt chunks tile it, and it loads into
// another distributed-optimizer layout: TP=3 (from 2) over a flat buffer
// split over DP=3 (from 2), bit for bit.
TEST(MegatronTorchDistTest, NdFlattenedOptimizerStateRebuiltPerParameter) {
  struct Param {
    std::string key;
    Shape shape;
    int tp_dim;
  };
  // fc1 is SwiGLU: each TP shard [W_i; V_i] was two blocks of 4 along dim 1.
  const std::vector<Param> params = {{"decoder.layers.mlp.linear_fc2.weight", {2, 4, 6}, 2},
                                     {"embedding.word_embeddings.weight", {8, 4}, 0},
                                     {"decoder.layers.mlp.linear_fc1.weight", {2, 8, 4}, 1}};
  const std::vector<std::string> states = {"fp32_param", "exp_avg", "exp_avg_sq"};
  auto want = [](int p, int j, int64_t flat) {
    return static_cast<float>(10000 * (j + 1) + 1000 * p + flat);
  };
  std::unique_ptr<Comm> comm = MakeSingleComm();
  for (const char* name : {"megatron_fsms_torch_dist", "megatron_fsms_mcore015_torch_dist"}) {
    SCOPED_TRACE(name);
    const std::string dir = Fixture(name);
    Result<DcpIndex> idx = ReadDcpIndex(DefaultStorage(), dir);
    ASSERT_TRUE(idx.ok()) << idx.status().ToString();
    // Whole tensors: the model params (stored plainly) and every state.
    State st;
    std::vector<std::vector<float>> bufs;
    bufs.reserve(params.size() * (states.size() + 1));
    for (size_t p = 0; p < params.size(); ++p) {
      for (int j = -1; j < static_cast<int>(states.size()); ++j) {
        const std::string key =
            j < 0 ? params[p].key : "optimizer.state." + states[j] + "." + params[p].key;
        const int64_t t = idx->m.FindTensor(key);
        ASSERT_GE(t, 0) << key;
        EXPECT_EQ(idx->m.tensors[t].shape, params[p].shape) << key;
        bufs.emplace_back(Box::Whole(params[p].shape).num_elements(), -1.0f);
        st.tensors.push_back(WholeTensor(key, DType::kF32, bufs.back().data(), params[p].shape));
      }
    }
    Result<LoadResult> r = Load(st, dir, *comm, LoadOptions{});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    for (size_t p = 0, b = 0; p < params.size(); ++p) {
      for (int j = -1; j < static_cast<int>(states.size()); ++j, ++b) {
        for (size_t k = 0; k < bufs[b].size(); ++k) {
          ASSERT_EQ(bufs[b][k], want(static_cast<int>(p), j, static_cast<int64_t>(k)))
              << params[p].key << " state " << j << " flat " << k;
        }
      }
    }
    Result<internal_checkpoint::VerifyReport> v =
        internal_checkpoint::VerifyDcp(DefaultStorage(), dir);
    ASSERT_TRUE(v.ok()) << v.status().ToString();
    EXPECT_TRUE(v->ok()) << (v->faults.empty() ? "" : v->faults[0].message);

    // exp_avg into TP=3, DP=3: per TP rank a flat buffer of both params' TP
    // shards (aligned to 4), each DP rank holding a third of it.
    for (int tp = 0; tp < 3; ++tp) {
      std::vector<LocalTensor> shard_layouts;
      for (const Param& prm : params) {
        Result<LocalTensor> l =
            SplitTensor(prm.key, DType::kF32, nullptr, prm.shape, prm.tp_dim, tp, 3);
        ASSERT_TRUE(l.ok()) << l.status().ToString();
        shard_layouts.push_back(*l);
      }
      Result<FlatBufferLayout> fl = PlanFlatBuffer(shard_layouts, 4, 3);
      ASSERT_TRUE(fl.ok()) << fl.status().ToString();
      for (int dp = 0; dp < 3; ++dp) {
        std::vector<float> buf(fl->shard_size, -1.0f);
        Result<std::vector<LocalTensor>> pieces =
            FlatBufferShard(shard_layouts, *fl, dp, buf.data(), DType::kF32);
        ASSERT_TRUE(pieces.ok()) << pieces.status().ToString();
        State os;
        os.tensors = *pieces;
        AddKeyPrefix(&os, "optimizer.state.exp_avg.");
        LoadOptions o;
        o.allow_unexpected_keys = true;
        Result<LoadResult> lr = Load(os, dir, *comm, o);
        ASSERT_TRUE(lr.ok()) << lr.status().ToString();
        // Element e of the buffer is element k of param p's TP shard.
        for (size_t p = 0; p < params.size(); ++p) {
          const LocalTensor& full = shard_layouts[p];
          const Box& box = full.segments[0].global_box;
          for (int64_t k = 0; k < box.num_elements(); ++k) {
            const int64_t e = fl->offsets[p] + k - dp * fl->shard_size;
            if (e < 0 || e >= fl->shard_size) continue;
            // The global flat index of the shard's element k.
            int64_t rest = k, g = 0, stride = 1;
            Shape idx_in(box.rank());
            for (size_t d = box.rank(); d-- > 0;) {
              idx_in[d] = rest % box.shape[d];
              rest /= box.shape[d];
            }
            for (size_t d = box.rank(); d-- > 0;) {
              g += (box.offset[d] + idx_in[d]) * stride;
              stride *= params[p].shape[d];
            }
            ASSERT_EQ(buf[e], want(static_cast<int>(p), 1, g))
                << params[p].key << " tp " << tp << " dp " << dp << " k " << k;
          }
        }
      }
    }
  }
}

// The model of make_megatron_distopt_fixture.py: key, global shape, TP dim
// (-1: replicated). State j of parameter p holds 10000 (j + 1) + 1000 p + k.
struct DistOptParam {
  std::string key;
  Shape shape;
  int tp_dim;
};
const std::vector<DistOptParam>& DistOptParams() {
  static const std::vector<DistOptParam> p = {
      {"embedding.word_embeddings.weight", {40, 4}, 0},
      {"decoder.layers.self_attention.linear_proj.weight", {2, 4, 40}, 2},
      {"decoder.layers.self_attention.linear_qkv.layer_norm_weight", {2, 4}, -1},
      {"decoder.layers.self_attention.linear_qkv.weight", {2, 8, 4}, 1},
      {"decoder.layers.mlp.linear_fc1.layer_norm_weight", {2, 4}, -1},
      {"decoder.layers.mlp.linear_fc1.weight", {2, 36, 4}, 1},
      {"decoder.layers.mlp.linear_fc2.weight", {2, 4, 18}, 2},
      {"decoder.final_layernorm.weight", {4}, -1},
      {"output_layer.weight", {40, 4}, 0}};
  return p;
}

// Loads state `state` (index j) of every parameter from `dir` into a TP=3
// (from 2) distributed optimizer: per TP rank a flat buffer of the TP shards
// (aligned to 4) split over DP=3 (from 2), and checks every element.
void LoadIntoTp3Dp3(const std::string& dir, const std::string& state, int j) {
  std::unique_ptr<Comm> comm = MakeSingleComm();
  const std::vector<DistOptParam>& params = DistOptParams();
  for (int tp = 0; tp < 3; ++tp) {
    std::vector<LocalTensor> shards;
    for (const DistOptParam& prm : params) {
      if (prm.tp_dim < 0) {
        shards.push_back(WholeTensor(prm.key, DType::kF32, nullptr, prm.shape));
        continue;
      }
      Result<LocalTensor> l =
          SplitTensor(prm.key, DType::kF32, nullptr, prm.shape, prm.tp_dim, tp, 3);
      ASSERT_TRUE(l.ok()) << l.status().ToString();
      shards.push_back(*l);
    }
    Result<FlatBufferLayout> fl = PlanFlatBuffer(shards, 4, 3);
    ASSERT_TRUE(fl.ok()) << fl.status().ToString();
    for (int dp = 0; dp < 3; ++dp) {
      std::vector<float> buf(fl->shard_size, -1.0f);
      Result<std::vector<LocalTensor>> pieces =
          FlatBufferShard(shards, *fl, dp, buf.data(), DType::kF32);
      ASSERT_TRUE(pieces.ok()) << pieces.status().ToString();
      State os;
      os.tensors = *pieces;
      AddKeyPrefix(&os, "optimizer.state." + state + ".");
      LoadOptions o;
      o.allow_unexpected_keys = true;
      Result<LoadResult> lr = Load(os, dir, *comm, o);
      ASSERT_TRUE(lr.ok()) << lr.status().ToString();
      for (size_t p = 0; p < params.size(); ++p) {
        const Box& box = shards[p].segments[0].global_box;
        for (int64_t k = 0; k < box.num_elements(); ++k) {
          const int64_t e = fl->offsets[p] + k - dp * fl->shard_size;
          if (e < 0 || e >= fl->shard_size) continue;
          Shape at = internal_geometry::UnravelIndex(box.shape, k);
          for (size_t d = 0; d < at.size(); ++d) at[d] += box.offset[d];
          const int64_t g = internal_geometry::RowMajorIndex(params[p].shape, at);
          ASSERT_EQ(buf[e], static_cast<float>(10000 * (j + 1) + 1000 * p + g))
              << params[p].key << " " << state << " tp " << tp << " dp " << dp << " k " << k;
        }
      }
    }
  }
}

// The distributed optimizer's dp_reshardable buckets
// (make_megatron_distopt_fixture.py: TP=2, DP=2, 5 buckets per TP group,
// 64-element alignment gaps, a parameter straddling the DP ranks, SwiGLU and
// replicated layer norms) are rebuilt per parameter: every state of every
// parameter equals, element for element, the fully_reshardable checkpoint of
// the same state (and the formula), whole and loaded into TP=3 / DP=3; verify
// finds the rebuilt chunks tile; inspect says how many were rebuilt.
TEST(MegatronTorchDistTest, DpReshardableBucketsRebuiltPerParameter) {
  const std::vector<std::string> states = {"param", "exp_avg", "exp_avg_sq"};
  std::unique_ptr<Comm> comm = MakeSingleComm();
  for (const char* name : {"megatron_dpr_torch_dist", "megatron_fr_torch_dist"}) {
    SCOPED_TRACE(name);
    const std::string dir = Fixture(name);
    Result<DcpIndex> idx = ReadDcpIndex(DefaultStorage(), dir);
    ASSERT_TRUE(idx.ok()) << idx.status().ToString();
    if (std::string(name) == "megatron_dpr_torch_dist") {
      EXPECT_THAT(idx->m.metadata_json, HasSubstr("\"dp_reshardable\":{\"rebuilt_tensors\":27}"));
    }
    State st;
    std::vector<std::vector<float>> bufs;
    bufs.reserve(DistOptParams().size() * states.size());
    for (const DistOptParam& prm : DistOptParams()) {
      for (const std::string& s : states) {
        bufs.emplace_back(Box::Whole(prm.shape).num_elements(), -1.0f);
        st.tensors.push_back(WholeTensor("optimizer.state." + s + "." + prm.key, DType::kF32,
                                         bufs.back().data(), prm.shape));
      }
    }
    LoadOptions o;
    o.allow_unexpected_keys = true;
    Result<LoadResult> r = Load(st, dir, *comm, o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    for (size_t p = 0, b = 0; p < DistOptParams().size(); ++p) {
      for (size_t j = 0; j < states.size(); ++j, ++b) {
        for (size_t k = 0; k < bufs[b].size(); ++k) {
          ASSERT_EQ(bufs[b][k], static_cast<float>(10000 * (j + 1) + 1000 * p + k))
              << DistOptParams()[p].key << " " << states[j] << " flat " << k;
        }
      }
    }
    for (size_t j = 0; j < states.size(); ++j) LoadIntoTp3Dp3(dir, states[j], static_cast<int>(j));
    Result<internal_checkpoint::VerifyReport> v =
        internal_checkpoint::VerifyDcp(DefaultStorage(), dir);
    ASSERT_TRUE(v.ok()) << v.status().ToString();
    EXPECT_TRUE(v->ok()) << (v->faults.empty() ? "" : v->faults[0].message);
  }
}

// A common.pt whose pickle shares one value twice at each of 60 levels
// (2^60 paths) renders in bounded time, truncated.
TEST(MegatronTorchDistTest, SharedReferencesRenderBounded) {
  using namespace std::string_literals;
  // PROTO 2, EMPTY_LIST, BINPUT 0, POP; per level (memo[0], memo[0]) -> memo[0], POP;
  // the last level, STOP.
  std::string pkl =
      "\x80\x02]q\x00"
      "0"s;
  for (int i = 0; i < 60; ++i)
    pkl +=
        "(h\x00h\x00tq\x00"
        "0"s;
  pkl += "h\x00."s;
  ZipLayout zip;
  const size_t e = zip.Add("common/data.pkl", pkl.size());
  zip.SetCrc32(e, Crc32(0, pkl.data(), pkl.size()));
  std::string archive = zip.LocalHeader(e) + pkl;
  ASSERT_EQ(archive.size(), zip.tail_offset());
  archive += zip.Tail();
  Result<std::string> j = CommonPtToJson(archive, "common.pt");
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  EXPECT_THAT(*j, HasSubstr("<truncated>"));
}

}  // namespace
}  // namespace shardpoint
