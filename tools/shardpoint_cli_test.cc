// The `shardpoint` binary end to end: inspect and verify on real checkpoint
// directories (several at once, --json, --quiet), their exit codes, verify
// naming the chunk of a flipped byte, the conventions (--version, usage errors
// exit 2 with the usage on stderr, --help with an example everywhere, progress
// bars only on a terminal and never in --json), and docs/cli.md against --help.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <vector>

#include "shardpoint/checkpoint.h"
#include "shardpoint/verify.h"
#include "tests/testing/run_command.h"

#if !defined(SP_CLI_PATH) || !defined(SP_VERSION) || !defined(SP_SOURCE_DIR)
#error "SP_CLI_PATH (the shardpoint binary), SP_VERSION, SP_SOURCE_DIR must be defined by the build"
#endif

namespace shardpoint {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

using CliRun = ::shardpoint::testing::CommandResult;

// `redirect`: " 2>&1" both streams, " 2>/dev/null" stdout only,
// " 2>&1 >/dev/null" stderr only.
CliRun RunCli(const std::string& args, const std::string& redirect = " 2>&1") {
  return ::shardpoint::testing::RunCommand(std::string(SP_CLI_PATH) + " " + args + redirect);
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

  // Flips one bit inside chunk 1 of "layer.w" in `dir`; returns that chunk.
  ChunkDescription FlipByteOfChunk1(const std::string& dir) {
    Result<CheckpointDescription> d = DescribeCheckpoint(dir);
    EXPECT_TRUE(d.ok()) << d.status().ToString();
    if (!d.ok()) return {};
    files_ = d->files;
    const ChunkDescription c = d->tensors.at(0).chunks.at(1);
    std::fstream f(dir + "/" + d->files.at(c.file),
                   std::ios::in | std::ios::out | std::ios::binary);
    EXPECT_TRUE(f.good());
    f.seekg(static_cast<std::streamoff>(c.offset + 5));
    char b = 0;
    f.read(&b, 1);
    b = static_cast<char>(b ^ 0x01);
    f.seekp(static_cast<std::streamoff>(c.offset + 5));
    f.write(&b, 1);
    return c;
  }
  // A second checkpoint, a copy of the first.
  std::string CopyCheckpoint() {
    const std::string copy = root_ + "/copy";
    EXPECT_EQ(std::system(("cp -r " + dir_ + " " + copy).c_str()), 0);
    return copy;
  }

  std::vector<std::string> files_;

  std::string root_, dir_;
  std::vector<float> w_ = std::vector<float>(64 * 16);
};

TEST_F(CliTest, ExportAndConvertNameTheOptionTheyRefuse) {
  // export-hf and convert read --max-shard-size, --set and --dtype alike;
  // a bad value exits 2 naming it, and writes nothing.
  for (const std::string sub : {"export-hf", "convert"}) {
    const std::string run = sub + " " + dir_ + " " + root_ + "/out ";
    CliRun r = RunCli(run + "--max-shard-size 5XB");
    EXPECT_EQ(r.exit_code, 2) << sub;
    EXPECT_THAT(r.out, HasSubstr("shardpoint " + sub + ": ")) << sub;
    EXPECT_THAT(r.out, HasSubstr("size '5XB': unknown unit")) << r.out;
    r = RunCli(run + "--set heads");
    EXPECT_EQ(r.exit_code, 2) << sub;
    EXPECT_THAT(r.out, HasSubstr("--set 'heads': expected name=integer")) << r.out;
    r = RunCli(run + "--dtype q7");
    EXPECT_EQ(r.exit_code, 2) << sub;
    EXPECT_THAT(r.out, HasSubstr("q7")) << r.out;
    EXPECT_FALSE(std::filesystem::exists(root_ + "/out")) << sub;
  }
}

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

// --io-threads is the flag's name; the old --threads still works (hidden from
// --help); a bad value is a usage error under either name.
TEST_F(CliTest, IoThreadsAndItsOldNameThreads) {
  for (const char* flag : {"--io-threads 2 ", "--threads 2 "}) {
    CliRun r = RunCli(std::string("verify ") + flag + dir_);
    EXPECT_EQ(r.exit_code, 0) << flag << r.out;
    EXPECT_THAT(r.out, HasSubstr("OK"));
    r = RunCli(std::string("diff ") + flag + dir_ + " " + CopyCheckpoint());
    EXPECT_EQ(r.exit_code, 0) << flag << r.out;
    ASSERT_TRUE(DefaultStorage()->RemoveAll(root_ + "/copy").ok());
  }
  EXPECT_EQ(RunCli("verify --io-threads many " + dir_).exit_code, 2);
  CliRun help = RunCli("verify --help");
  EXPECT_THAT(help.out, HasSubstr("--io-threads INT=4"));
  EXPECT_THAT(help.out, Not(HasSubstr("  --threads")));
}

TEST_F(CliTest, VerifyPassesThenNamesTheFlippedChunk) {
  CliRun r = RunCli("verify " + dir_);
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("OK"));

  const ChunkDescription c = FlipByteOfChunk1(dir_);
  const std::string file = files_.at(c.file);
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
}

TEST_F(CliTest, VerifyJsonGivesFaultsAsRecords) {
  CliRun r = RunCli("verify --json " + dir_, " 2>/dev/null");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  nlohmann::json j = nlohmann::json::parse(r.out, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  EXPECT_EQ(j["dir"], dir_);
  EXPECT_EQ(j["ok"], true);
  EXPECT_EQ(j["tensors"], 1);
  EXPECT_EQ(j["chunks_checked"], 2);
  EXPECT_EQ(j["bytes_checked"], 64 * 16 * 4);
  EXPECT_TRUE(j["faults"].empty());

  const ChunkDescription c = FlipByteOfChunk1(dir_);
  r = RunCli("verify --json " + dir_, " 2>/dev/null");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  j = nlohmann::json::parse(r.out, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  EXPECT_EQ(j["ok"], false);
  ASSERT_EQ(j["faults"].size(), 1u) << r.out;
  const nlohmann::json& f = j["faults"][0];
  EXPECT_EQ(f["kind"], "chunk");
  EXPECT_EQ(f["key"], "layer.w");
  EXPECT_EQ(f["chunk"], 1);
  EXPECT_EQ(f["file"], files_.at(c.file));
  EXPECT_EQ(f["begin"], c.offset);
  EXPECT_EQ(f["end"], c.offset + c.nbytes);
  EXPECT_THAT(f["message"].get<std::string>(), HasSubstr("checksum mismatch"));

  r = RunCli("verify --json " + root_ + "/nothing", " 2>/dev/null");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  j = nlohmann::json::parse(r.out, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  EXPECT_EQ(j["ok"], false);
  EXPECT_THAT(j["error"].get<std::string>(), HasSubstr("NotFound"));
}

TEST_F(CliTest, SeveralDirectoriesEachReportedTheWorstExitCodeWins) {
  const std::string copy = CopyCheckpoint();
  CliRun r = RunCli("inspect " + dir_ + " " + copy, " 2>/dev/null");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("checkpoint " + dir_ + " (format"));
  EXPECT_THAT(r.out, HasSubstr("checkpoint " + copy + " (format"));
  // --json: one line per directory, in argument order.
  r = RunCli("inspect --json " + dir_ + " " + copy, " 2>/dev/null");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  std::istringstream lines(r.out);
  std::vector<std::string> dirs;
  for (std::string line; std::getline(lines, line);) {
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    ASSERT_FALSE(j.is_discarded()) << line;
    dirs.push_back(j["dir"]);
    EXPECT_EQ(j["manifest"]["tensors"][0]["key"], "layer.w") << line;
  }
  EXPECT_EQ(dirs, (std::vector<std::string>{dir_, copy}));

  FlipByteOfChunk1(copy);
  r = RunCli("verify " + dir_ + " " + copy);
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_THAT(r.out, HasSubstr("verified " + dir_ + ": 1 tensors"));
  EXPECT_THAT(r.out, HasSubstr("verified " + copy + ": 1 tensors"));
  EXPECT_THAT(r.out, HasSubstr("FAILED: 1 fault"));
  // An unreadable one is reported and the others still verified: exit 2.
  r = RunCli("verify " + root_ + "/nothing " + dir_ + " " + copy);
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_THAT(r.out, HasSubstr("NotFound"));
  EXPECT_THAT(r.out, HasSubstr("verified " + dir_ + ": 1 tensors"));
  EXPECT_THAT(r.out, HasSubstr("FAILED: 1 fault"));
  r = RunCli("inspect " + dir_ + " " + root_ + "/nothing");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_THAT(r.out, HasSubstr("checkpoint " + dir_ + " (format"));
}

TEST_F(CliTest, QuietPrintsOnlyFaults) {
  CliRun r = RunCli("verify --quiet " + dir_);
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out, "");
  FlipByteOfChunk1(dir_);
  r = RunCli("verify -q " + dir_);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.out, StartsWith("FAULT: tensor 'layer.w' chunk 1 "));
  EXPECT_THAT(r.out, HasSubstr("FAILED: " + dir_ + ": 1 fault(s)\n"));
  EXPECT_THAT(r.out, Not(HasSubstr("verified")));
}

// On a terminal (a pseudo-terminal from script(1)) verify draws its progress
// bar on stderr; with --json, or --quiet, it does not.
TEST_F(CliTest, ProgressBarOnlyOnATerminalNeverInJson) {
  if (std::system("command -v script >/dev/null 2>&1") != 0) GTEST_SKIP() << "no script(1)";
  auto on_tty = [&](const std::string& args) {
    return ::shardpoint::testing::RunCommand("script -qec '" + std::string(SP_CLI_PATH) + " " +
                                             args + "' /dev/null");
  };
  CliRun r = on_tty("verify " + dir_);
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("verify ["));
  EXPECT_THAT(r.out, HasSubstr("100.0%"));
  r = on_tty("verify --json " + dir_);
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_THAT(r.out, Not(HasSubstr("verify [")));
  EXPECT_THAT(r.out, HasSubstr("\"ok\":true"));
  r = on_tty("verify --quiet " + dir_);
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_THAT(r.out, Not(HasSubstr("verify [")));
  r = RunCli("verify " + dir_);  // a pipe, not a terminal
  EXPECT_THAT(r.out, Not(HasSubstr("verify [")));
}

TEST(CliConventionsTest, VersionPrintsTheProjectVersion) {
  CliRun r = RunCli("--version", " 2>/dev/null");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out, std::string("shardpoint ") + SP_VERSION + "\n");
}

TEST(CliConventionsTest, UsageErrorsExitTwoWithTheUsageOnStderr) {
  struct Case {
    std::string args, usage;
  };
  for (const Case& c : {Case{"", "Usage: shardpoint [OPTIONS] SUBCOMMAND"},
                        Case{"frobnicate", "Usage: shardpoint [OPTIONS] SUBCOMMAND"},
                        Case{"verify", "Usage: shardpoint verify [OPTIONS] dir..."},
                        Case{"inspect --bogus /tmp", "Usage: shardpoint inspect [OPTIONS] dir..."},
                        Case{"verify --threads many /tmp", "Usage: shardpoint verify"},
                        Case{"diff onlyone", "Usage: shardpoint diff [OPTIONS] a b"},
                        Case{"export-hf", "Usage: shardpoint export-hf"},
                        Case{"convert a", "Usage: shardpoint convert"}}) {
    CliRun err = RunCli(c.args, " 2>&1 >/dev/null");
    EXPECT_EQ(err.exit_code, 2) << c.args << ": " << err.out;
    EXPECT_THAT(err.out, StartsWith("shardpoint: ")) << c.args;
    EXPECT_THAT(err.out, HasSubstr(c.usage)) << c.args << ": " << err.out;
    CliRun out = RunCli(c.args, " 2>/dev/null");
    EXPECT_EQ(out.out, "") << c.args << ": usage must not go to stdout";
  }
}

const char* const kCommands[] = {"inspect", "verify", "export-hf", "convert", "diff"};

TEST(CliConventionsTest, EveryHelpHasUsageAndAnExample) {
  for (const std::string cmd : kCommands) {
    CliRun r = RunCli(cmd + " --help", " 2>/dev/null");
    EXPECT_EQ(r.exit_code, 0) << cmd;
    EXPECT_THAT(r.out, HasSubstr("Usage: shardpoint " + cmd + " [OPTIONS]")) << r.out;
    EXPECT_THAT(r.out, HasSubstr("\nExample")) << r.out;
    EXPECT_THAT(r.out, HasSubstr("\n  shardpoint " + cmd + " ")) << r.out;
  }
  CliRun r = RunCli("--help", " 2>/dev/null");
  EXPECT_EQ(r.exit_code, 0);
  for (const std::string cmd : kCommands) EXPECT_THAT(r.out, HasSubstr("  " + cmd + " ")) << r.out;
}

// docs/cli.md shows every --help text verbatim: a changed flag or example
// fails here until the page is updated.
TEST(CliConventionsTest, DocsCliMdHoldsEveryHelpText) {
  std::ifstream f(std::string(SP_SOURCE_DIR) + "/docs/cli.md");
  ASSERT_TRUE(f.good());
  const std::string doc((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<std::string> args = {"--help"};
  for (const std::string cmd : kCommands) args.push_back(cmd + " --help");
  for (const std::string& a : args) {
    CliRun r = RunCli(a, " 2>/dev/null");
    ASSERT_EQ(r.exit_code, 0) << a;
    EXPECT_NE(doc.find("$ shardpoint " + a + "\n" + r.out), std::string::npos)
        << "docs/cli.md lacks the output of `shardpoint " << a << "`; regenerate the page: "
        << "scripts/gen_cli_doc.py. The output is now:\n"
        << r.out;
  }
}

// The CLI is a client of the public API: nothing under tools/ (but its tests)
// includes a header from src/.
TEST(CliConventionsTest, CliIncludesOnlyPublicHeaders) {
  int files = 0;
  for (const auto& e :
       std::filesystem::recursive_directory_iterator(std::string(SP_SOURCE_DIR) + "/tools")) {
    const std::string path = e.path().string();
    if (!e.is_regular_file() || path.ends_with("_test.cc")) continue;
    ++files;
    std::ifstream f(path);
    int n = 0;
    for (std::string line; std::getline(f, line);) {
      ++n;
      EXPECT_THAT(line, Not(StartsWith("#include \"src/"))) << path << ":" << n;
    }
  }
  EXPECT_GE(files, 10);
}

}  // namespace
}  // namespace shardpoint
