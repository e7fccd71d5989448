// A FIFO, a directory or a symbolic link where a checkpoint file belongs:
// reads (verify, inspect, load) fail with a typed error naming the file
// instead of blocking forever, and writes never go through a link.
//
// Every operation runs in a child process under alarm(), so a regression
// fails the test instead of hanging it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <functional>

#include "shardpoint/checkpoint.h"
#include "shardpoint/manager.h"
#include "src/checkpoint/verify.h"
#include "src/source/manifest_read.h"

namespace shardpoint {
namespace {

using ::testing::HasSubstr;

// Runs `check` in a child; fails if it returns false or takes over 20 s.
void ExpectInChild(const std::function<bool()>& check, const std::string& what) {
  pid_t child = fork();
  if (child == 0) {
    alarm(20);
    _exit(check() ? 0 : 1);
  }
  ASSERT_GT(child, 0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  if (WIFSIGNALED(status)) {
    ADD_FAILURE() << what << ": blocked (killed by signal " << WTERMSIG(status) << ")";
  } else {
    EXPECT_EQ(WEXITSTATUS(status), 0) << what << ": no typed error (see the child's output)";
  }
}

// True if `s` is the IOError that names `path` as not a regular file.
bool IsNotRegular(const Status& s, const std::string& path, const std::string& kind) {
  const std::string want = path + " for reading: not a regular file (" + kind + ")";
  if (s.code() == StatusCode::kIOError && s.message().find(want) != std::string::npos) return true;
  fprintf(stderr, "got %s, want an IOError containing '%s'\n", s.ToString().c_str(), want.c_str());
  return false;
}

struct Filled {
  std::vector<float> mem = std::vector<float>(16, 3.0f);
  State state;
  Filled() {
    LocalTensor t;
    t.data = mem.data();
    t.shape = {4, 4};
    t.segments = {Segment{"w", {4, 4}, Box::Whole({4, 4}), {0, 0}}};
    state.tensors.push_back(t);
  }
};

class SpecialFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/shardpoint_special_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    dir_ = root_ + "/ck";
    Status s = Save(Filled().state, dir_, *comm_).status();
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  void TearDown() override { EXPECT_TRUE(DefaultStorage()->RemoveAll(root_).ok()); }
  void ReplaceWithFifo(const std::string& path) {
    ASSERT_EQ(unlink(path.c_str()), 0);
    ASSERT_EQ(mkfifo(path.c_str(), 0644), 0);
  }
  std::string root_, dir_;
  std::unique_ptr<Comm> comm_ = MakeSingleComm();
};

TEST_F(SpecialFilesTest, FifoAsManifestFailsVerifyInspectAndLoad) {
  const std::string manifest = dir_ + "/manifest";
  ReplaceWithFifo(manifest);
  ExpectInChild(
      [&] {
        return IsNotRegular(internal_checkpoint::VerifyCheckpoint(DefaultStorage(), dir_).status(),
                            manifest, "a FIFO");
      },
      "verify");
  ExpectInChild(
      [&] {  // what `shardpoint inspect` reads
        return IsNotRegular(internal_source::ReadManifest(DefaultStorage(), dir_).status(),
                            manifest, "a FIFO");
      },
      "inspect");
  ExpectInChild(
      [&] {
        Filled out;
        std::unique_ptr<Comm> comm = MakeSingleComm();
        return IsNotRegular(Load(out.state, dir_, *comm).status(), manifest, "a FIFO");
      },
      "load");
}

TEST_F(SpecialFilesTest, FifoAsDataFileFailsVerifyAndLoad) {
  const std::string data = dir_ + "/data/0.safetensors";
  ReplaceWithFifo(data);
  ExpectInChild(
      [&] {
        Result<internal_checkpoint::VerifyReport> r =
            internal_checkpoint::VerifyCheckpoint(DefaultStorage(), dir_);
        if (!r.ok() || r->ok()) return false;
        for (const VerifyFault& f : r->faults) {
          if (f.message.find(data + " for reading: not a regular file (a FIFO)") !=
              std::string::npos) {
            return true;
          }
        }
        fprintf(stderr, "faults: %s\n", r->faults.empty() ? "" : r->faults[0].message.c_str());
        return false;
      },
      "verify");
  ExpectInChild(
      [&] {
        Filled out;
        std::unique_ptr<Comm> comm = MakeSingleComm();
        return IsNotRegular(Load(out.state, dir_, *comm).status(), data, "a FIFO");
      },
      "load");
}

TEST_F(SpecialFilesTest, DirectoryAsDataFileIsRefusedAtOpen) {
  const std::string data = dir_ + "/data/0.safetensors";
  ASSERT_EQ(unlink(data.c_str()), 0);
  ASSERT_EQ(mkdir(data.c_str(), 0755), 0);
  Result<std::unique_ptr<ReadableFile>> f = DefaultStorage()->NewReadableFile(data);
  EXPECT_EQ(f.status().code(), StatusCode::kIOError);
  EXPECT_THAT(f.status().message(), HasSubstr(data + " for reading: Is a directory"));
}

TEST_F(SpecialFilesTest, FifoWhereTheTrackerIsWrittenFailsTheUpdate) {
  ExpectInChild(
      [&] {
        std::unique_ptr<Comm> comm = MakeSingleComm();
        auto m = CheckpointManager::Open(root_ + "/run", *comm);
        if (!m.ok() || mkfifo((root_ + "/run/latest.tmp").c_str(), 0644) != 0) return false;
        Status s = (*m)->Save(Filled().state, 1, *comm).status();
        fprintf(stderr, "%s\n", s.ToString().c_str());
        return !s.ok() && s.message().find("latest.tmp") != std::string::npos;
      },
      "tracker update");
}

// Policy (docs/format.md): reads follow symbolic links, writes never do.
TEST_F(SpecialFilesTest, SaveNeverWritesThroughALinkPlantedInTheCheckpoint) {
  const std::string victim = root_ + "/victim";
  ASSERT_TRUE(DefaultStorage()->WriteStringToFile(victim, "precious").ok());
  const std::string dir = root_ + "/ck2";
  ASSERT_EQ(mkdir(dir.c_str(), 0755), 0);
  // A dangling link where the manifest is staged: following it would create
  // its target outside the checkpoint.
  const std::string outside = root_ + "/created_outside";
  ASSERT_EQ(symlink(outside.c_str(), (dir + "/manifest.tmp").c_str()), 0);
  Status s = Save(Filled().state, dir, *comm_).status();
  EXPECT_TRUE(s.ok()) << s.ToString();  // the leftover link is removed, not written through
  EXPECT_FALSE(*DefaultStorage()->Exists(outside));
  struct stat st;
  ASSERT_EQ(lstat((dir + "/manifest").c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  ASSERT_EQ(symlink(victim.c_str(), (dir + "/link2").c_str()), 0);
  Result<std::unique_ptr<WritableFile>> through =
      DefaultStorage()->NewWritableFile(dir + "/link2", WriteFileOptions{});
  EXPECT_EQ(through.status().code(), StatusCode::kIOError);
  EXPECT_THAT(through.status().message(), HasSubstr(dir + "/link2"));
  EXPECT_EQ(*DefaultStorage()->ReadFileToString(victim), "precious");
  // Reads follow links: a checkpoint may be assembled from links.
  Result<std::string> read = DefaultStorage()->ReadFileToString(dir + "/link2");
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(*read, "precious");
}

}  // namespace
}  // namespace shardpoint
