#include <gtest/gtest.h>

#include <memory>

#include "shardpoint/checkpoint_kind.h"

namespace shardpoint {
namespace {

TEST(CheckpointKindTest, DecidedByTheFilesWithManifestFirst) {
  std::unique_ptr<Storage> s = NewMemStorage();
  auto kind = [&](const std::string& dir) { return DetectCheckpointKind(dir, s.get()).value(); };
  ASSERT_TRUE(s->CreateDirs("sp").ok());
  ASSERT_TRUE(s->WriteStringToFile("sp/manifest", "{}").ok());
  ASSERT_TRUE(s->WriteStringToFile("sp/.metadata", "x").ok());  // manifest wins
  ASSERT_TRUE(s->CreateDirs("dcp").ok());
  ASSERT_TRUE(s->WriteStringToFile("dcp/.metadata", "x").ok());
  ASSERT_TRUE(s->WriteStringToFile("dcp/model.safetensors", "x").ok());  // .metadata wins
  ASSERT_TRUE(s->CreateDirs("hf").ok());
  ASSERT_TRUE(s->WriteStringToFile("hf/config.json", "{}").ok());
  ASSERT_TRUE(s->WriteStringToFile("hf/model-00001-of-00002.safetensors", "x").ok());
  ASSERT_TRUE(s->CreateDirs("empty").ok());
  ASSERT_TRUE(s->WriteStringToFile("empty/.safetensors", "x").ok());  // no name before it
  ASSERT_TRUE(s->WriteStringToFile("file", "x").ok());
  EXPECT_EQ(kind("sp"), CheckpointKind::kShardpoint);
  EXPECT_EQ(kind("sp/"), CheckpointKind::kShardpoint);
  EXPECT_EQ(kind("dcp"), CheckpointKind::kPyTorchDcp);
  EXPECT_EQ(kind("hf"), CheckpointKind::kHfModel);
  EXPECT_EQ(kind("empty"), CheckpointKind::kNone);
  EXPECT_EQ(kind("missing"), CheckpointKind::kNone);
  EXPECT_EQ(kind("file"), CheckpointKind::kNone);
  EXPECT_STREQ(CheckpointKindName(CheckpointKind::kPyTorchDcp), "pytorch_dcp");
  EXPECT_STREQ(CheckpointKindName(CheckpointKind::kHfModel), "hf_model");
}

}  // namespace
}  // namespace shardpoint
