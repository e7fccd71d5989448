// The `shardpoint` binary end to end: inspect and verify on a real checkpoint
// directory, their exit codes, and verify naming the chunk of a flipped byte.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "shardpoint/checkpoint.h"
#include "src/checkpoint/commit.h"

#ifndef SP_CLI_PATH
#error "SP_CLI_PATH (the shardpoint binary) must be defined by the build"
#endif

namespace shardpoint {
namespace {

using ::testing::HasSubstr;

struct CliRun {
  int exit_code = -1;
  std::string out;  // stdout and stderr
};

CliRun RunCli(const std::string& args) {
  CliRun r;
  const std::string cmd = std::string(SP_CLI_PATH) + " " + args + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int status = ::pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/shardpoint_cli_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    dir_ = root_ + "/ckpt";
    std::mt19937 rng(7);
    for (auto& v : w_) v = static_cast<float>(rng() % 4096) / 16.0f;
    // Two ranks, rows [0, 32) and [32, 64) of "layer.w" [64, 16] F32.
    std::vector<Status> st = RunThreadRanks(2, [&](Comm& comm) -> Status {
      const int r = comm.rank();
      LocalTensor t;
      t.data = w_.data() + r * 32 * 16;
      t.shape = {32, 16};
      t.segments = {Segment{"layer.w", {64, 16}, Box{{32 * r, 0}, {32, 16}}, {0, 0}}};
      State s;
      s.tensors = {t};
      return Save(s, dir_, comm).status();
    });
    for (const Status& s : st) ASSERT_TRUE(s.ok()) << s.ToString();
  }
  void TearDown() override { ASSERT_TRUE(DefaultStorage()->RemoveAll(root_).ok()); }

  std::string root_, dir_;
  std::vector<float> w_ = std::vector<float>(64 * 16);
};

TEST_F(CliTest, InspectPrintsTableAndJson) {
  CliRun r = RunCli("inspect " + dir_);
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("layer.w"));
  EXPECT_THAT(r.out, HasSubstr("[64, 16]"));
  r = RunCli("inspect --json " + dir_);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  nlohmann::json j = nlohmann::json::parse(r.out, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  EXPECT_THAT(j.dump(), HasSubstr("\"layer.w\""));
}

TEST_F(CliTest, VerifyPassesThenNamesTheFlippedChunk) {
  CliRun r = RunCli("verify " + dir_);
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("OK"));

  Result<internal::Manifest> m = internal::ReadManifest(DefaultStorage(), dir_);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const internal::ChunkRecord& c = m->tensors.at(0).chunks.at(1);
  const std::string file = m->files[c.file];
  {
    std::fstream f(dir_ + "/" + file, std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(f.good());
    f.seekg(static_cast<std::streamoff>(c.offset + 5));
    char b = 0;
    f.read(&b, 1);
    b = static_cast<char>(b ^ 0x01);
    f.seekp(static_cast<std::streamoff>(c.offset + 5));
    f.write(&b, 1);
  }
  r = RunCli("verify " + dir_);
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_THAT(r.out, HasSubstr("FAULT: tensor 'layer.w' chunk 1 [32:64, 0:16] in '" + file +
                               "': checksum mismatch at bytes [" + std::to_string(c.offset) + ", " +
                               std::to_string(c.offset + c.nbytes) + ")"));
  EXPECT_THAT(r.out, HasSubstr("FAILED: 1 fault"));
}

TEST_F(CliTest, NoCheckpointExitsTwoWithTheReason) {
  CliRun r = RunCli("verify " + root_ + "/nothing");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_THAT(r.out, HasSubstr("NotFound"));
  EXPECT_THAT(r.out, HasSubstr(root_ + "/nothing"));
  r = RunCli("inspect " + root_ + "/nothing");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  r = RunCli("frobnicate");
  EXPECT_NE(r.exit_code, 0) << r.out;
}

}  // namespace
}  // namespace shardpoint
