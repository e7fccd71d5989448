// --mapping: shipped names are found first and are built into the binary.
#include "tools/lib/hf_common.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "shardpoint/hf_rules.h"
#include "tests/testing/run_command.h"

#ifndef SP_CLI_PATH
#error "SP_CLI_PATH (the shardpoint binary) must be defined by the build"
#endif

namespace shardpoint::tools {
namespace {

namespace fs = std::filesystem;

class MappingFlagTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/shardpoint_mflag_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    // A working directory holding a directory named like a shipped mapping.
    fs::create_directories(root_ + "/cwd/llama");
    old_cwd_ = fs::current_path();
  }
  void TearDown() override {
    fs::current_path(old_cwd_);
    fs::remove_all(root_);
  }
  std::string root_;
  fs::path old_cwd_;
};

TEST_F(MappingFlagTest, ShippedNameWinsOverAnEntryOfThatNameInTheWorkingDirectory) {
  fs::current_path(root_ + "/cwd");
  Result<HfMapping> m = LoadMapping("llama");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  Result<HfMapping> shipped = ShippedHfMapping("llama");
  ASSERT_TRUE(shipped.ok());
  EXPECT_EQ(m->name, "llama");
  EXPECT_EQ(m->rules.size(), shipped->rules.size());
  // The local entry stays reachable by a path.
  Result<HfMapping> local = LoadMapping("./llama");
  EXPECT_FALSE(local.ok());
}

// The binary copied elsewhere, run from a directory with a `llama` entry:
// `--mapping llama` still gives the shipped rules (the run then fails on the
// missing checkpoint, not on the mapping).
TEST_F(MappingFlagTest, MovedBinaryStillHasTheShippedRules) {
  const std::string moved = root_ + "/bin/shardpoint";
  fs::create_directories(root_ + "/bin");
  fs::copy_file(SP_CLI_PATH, moved);
  fs::permissions(moved, fs::perms::owner_all);
  const std::string cmd = "cd " + root_ + "/cwd && " + moved + " export-hf " + root_ +
                          "/no_such_ckpt " + root_ + "/out --mapping llama 2>&1";
  const ::shardpoint::testing::CommandResult run = ::shardpoint::testing::RunCommand(cmd);
  const std::string& out = run.out;
  EXPECT_NE(run.exit_code, 0) << out;
  EXPECT_EQ(out.find("read llama"), std::string::npos) << out;
  EXPECT_EQ(out.find("mapping"), std::string::npos) << out;
  EXPECT_NE(out.find("no_such_ckpt"), std::string::npos) << out;
}

}  // namespace
}  // namespace shardpoint::tools
