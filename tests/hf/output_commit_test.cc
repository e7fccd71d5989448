// One way to commit an output, through the `shardpoint` binary: export-hf,
// convert (HF -> shardpoint) and convert --to dcp refuse an existing
// non-empty output naming it, replace it whole with --overwrite, and never
// leave a mix of two outputs; the HF reader refuses shards without their
// index. The reproduction of the bug: a second export into the directory of
// a sharded one used to exit 0 while `convert` read the first one's weights.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <random>
#include <set>

#include "shardpoint/checkpoint.h"
#include "shardpoint/comm.h"
#include "tests/testing/run_command.h"

#ifndef SP_CLI_PATH
#error "SP_CLI_PATH (the shardpoint binary) must be defined by the build"
#endif

namespace shardpoint {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

::shardpoint::testing::CommandResult Cli(const std::string& args) {
  return ::shardpoint::testing::RunCommand(std::string(SP_CLI_PATH) + " " + args + " 2>&1");
}

std::set<std::string> Names(const std::string& dir) {
  std::set<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.insert(e.path().filename().string());
  return out;
}

class OutputCommitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = ::testing::TempDir() + "sp_output_commit_" + std::to_string(::getpid());
    fs::remove_all(root_);
    fs::create_directories(root_);
    Save(a_, 1);
    Save(b_, 2);
  }
  void TearDown() override { fs::remove_all(root_); }

  // Four tensors [16, 16] F32 (1 KiB each) with values from `seed`.
  void Save(const std::string& name, uint32_t seed) {
    std::vector<std::vector<float>> mem(4, std::vector<float>(256));
    std::mt19937 rng(seed);
    State s;
    for (size_t i = 0; i < mem.size(); ++i) {
      for (float& v : mem[i]) v = static_cast<float>(rng() % 1000) / 8.0f;
      LocalTensor t;
      t.data = mem[i].data();
      t.shape = {16, 16};
      t.segments = {Segment{"w" + std::to_string(i), {16, 16}, Box::Whole({16, 16}), {0, 0}}};
      s.tensors.push_back(t);
    }
    std::unique_ptr<Comm> comm = MakeSingleComm();
    ASSERT_TRUE(::shardpoint::Save(s, root_ + "/" + name, *comm).ok());
  }
  std::string P(const std::string& name) const { return root_ + "/" + name; }

  std::string root_;
  const std::string a_ = "a", b_ = "b";
};

TEST_F(OutputCommitTest, ASecondExportIsRefusedThenReplacesTheFirstWhole) {
  auto r = Cli("export-hf " + P(a_) + " " + P("out") + " --max-shard-size 1KB -q");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  ASSERT_TRUE(fs::exists(P("out/model.safetensors.index.json")));
  // Without --overwrite: refused, naming the directory; nothing changes.
  r = Cli("export-hf " + P(b_) + " " + P("out") + " -q");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_THAT(r.out, HasSubstr("'" + P("out") + "' exists and is not empty"));
  EXPECT_THAT(r.out, HasSubstr("--overwrite"));
  EXPECT_EQ(Cli("diff " + P(a_) + " " + P("out") + " -q").exit_code, 0);
  // With it: the new export, whole, and nothing of the old one.
  r = Cli("export-hf " + P(b_) + " " + P("out") + " -q --overwrite");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(Names(P("out")), (std::set<std::string>{"model.safetensors"}));
  EXPECT_EQ(Names(root_), (std::set<std::string>{"a", "b", "out"}));
  r = Cli("convert " + P("out") + " " + P("back") + " -q");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(Cli("diff " + P(b_) + " " + P("back") + " -q").exit_code, 0);
  EXPECT_EQ(Cli("diff " + P(a_) + " " + P("back") + " -q").exit_code, 1);
}

TEST_F(OutputCommitTest, BothConvertsRefuseAnExistingOutputAndOverwriteIt) {
  ASSERT_EQ(Cli("export-hf " + P(a_) + " " + P("hf_a") + " -q").exit_code, 0);
  ASSERT_EQ(Cli("export-hf " + P(b_) + " " + P("hf_b") + " -q").exit_code, 0);
  struct Case {
    std::string from_a, from_b, flags;
  };
  for (const Case& c : {Case{P("hf_a"), P("hf_b"), ""}, Case{P(a_), P(b_), " --to dcp"}}) {
    SCOPED_TRACE(c.flags);
    const std::string out = P("conv");
    auto r = Cli("convert " + c.from_a + " " + out + c.flags + " -q");
    ASSERT_EQ(r.exit_code, 0) << r.out;
    r = Cli("convert " + c.from_b + " " + out + c.flags + " -q");
    EXPECT_EQ(r.exit_code, 2) << r.out;
    EXPECT_THAT(r.out, HasSubstr("'" + out + "' exists and is not empty"));
    EXPECT_EQ(Cli("diff " + P(a_) + " " + out + " -q").exit_code, 0);
    r = Cli("convert " + c.from_b + " " + out + c.flags + " -q --overwrite");
    ASSERT_EQ(r.exit_code, 0) << r.out;
    EXPECT_EQ(Cli("diff " + P(b_) + " " + out + " -q").exit_code, 0);
    EXPECT_FALSE(fs::exists(out + ".partial"));
    EXPECT_FALSE(fs::exists(out + ".old"));
    fs::remove_all(out);
  }
}

TEST_F(OutputCommitTest, AnEmptyDirectoryIsTakenWithoutOverwrite) {
  fs::create_directories(P("empty"));
  auto r = Cli("export-hf " + P(a_) + " " + P("empty") + " -q");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(Cli("diff " + P(a_) + " " + P("empty") + " -q").exit_code, 0);
}

TEST_F(OutputCommitTest, ShardsWithoutTheirIndexAreRefusedNamingIt) {
  ASSERT_EQ(Cli("export-hf " + P(a_) + " " + P("out") + " --max-shard-size 1KB -q").exit_code, 0);
  ASSERT_GT(Names(P("out")).size(), 2u);
  // What a killed export of the old design left: every shard, no index.
  fs::remove(P("out/model.safetensors.index.json"));
  for (const std::string& cmd :
       {"convert " + P("out") + " " + P("back") + " -q", "diff " + P(a_) + " " + P("out") + " -q",
        "export-hf " + P("out") + " " + P("again") + " -q"}) {
    auto r = Cli(cmd);
    EXPECT_EQ(r.exit_code, 2) << cmd << "\n" << r.out;
    EXPECT_THAT(r.out, HasSubstr("model.safetensors.index.json' does not exist")) << cmd;
    EXPECT_THAT(r.out, HasSubstr("model-00001-of-0000")) << cmd;
  }
  EXPECT_FALSE(fs::exists(P("back")));
  EXPECT_FALSE(fs::exists(P("again")));
}

}  // namespace
}  // namespace shardpoint
