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
#include "src/dcp/dcp_dir.h"
#include "src/dcp/torch_dist.h"
#include "src/dcp/zip.h"
#include "src/dcp/zip_writer.h"

using shardpoint::internal_dcp::CommonPtToJson;
using shardpoint::internal_dcp::Crc32;
using shardpoint::internal_dcp::DcpIndex;
using shardpoint::internal_dcp::ReadDcpIndex;
using shardpoint::internal_dcp::ZipLayout;

namespace shardpoint {
namespace {

using ::testing::HasSubstr;

std::string Fixture() {
  std::string f = __FILE__;
  std::string dir = f.substr(0, f.rfind("/tests/dcp/")) + "/tests/dcp/fixtures/megatron_torch_dist";
  Result<bool> here = DefaultStorage()->Exists(dir + "/.metadata");
  if (!here.ok() || !*here) dir = "tests/dcp/fixtures/megatron_torch_dist";
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
