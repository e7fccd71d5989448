// Every directory the library creates is durable before the call that made it
// returns: its parent is fsynced after it exists (PosixStorage::CreateDirs),
// so a power loss after a save returned cannot take the checkpoint's new
// parent directories, and the checkpoint with them.
//
// This binary defines mkdir(2) and fsync(2) itself: the library's calls reach
// these wrappers, which log them (fsync by the path of its descriptor) and
// call the C library's. The checks then read the log as strace would show it:
// each directory a call created (mkdir returned 0) must be followed by an
// fsync of its parent. Its own executable, so that no other test runs with
// the wrappers in place.
#include <dlfcn.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <mutex>
#include <ostream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "shardpoint/checkpoint.h"
#include "shardpoint/hf_export.h"
#include "shardpoint/manager.h"

namespace {

struct Call {
  std::string op;  // "mkdir" (successful ones only) or "fsync"
  std::string path;
  bool operator==(const Call& o) const { return op == o.op && path == o.path; }
};

// gtest prints calls through this (argument-dependent lookup).
[[maybe_unused]] std::ostream& operator<<(std::ostream& os, const Call& c) {
  return os << c.op << " " << c.path;
}

std::mutex g_mu;
std::vector<Call>* g_log = nullptr;  // guarded by g_mu; null: not logging

void Log(const char* op, std::string path) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_log != nullptr) g_log->push_back({op, std::move(path)});
}

template <typename F>
F Real(const char* name) {
  return reinterpret_cast<F>(dlsym(RTLD_NEXT, name));
}

}  // namespace

extern "C" int mkdir(const char* path, mode_t mode) {
  static auto real = Real<int (*)(const char*, mode_t)>("mkdir");
  const int r = real(path, mode);
  if (r == 0) Log("mkdir", path);
  return r;
}

extern "C" int fsync(int fd) {
  static auto real = Real<int (*)(int)>("fsync");
  char buf[PATH_MAX];
  const std::string link = "/proc/self/fd/" + std::to_string(fd);
  const ssize_t n = readlink(link.c_str(), buf, sizeof buf - 1);
  Log("fsync",
      n > 0 ? std::string(buf, static_cast<size_t>(n)) : "<fd " + std::to_string(fd) + ">");
  return real(fd);
}

namespace shardpoint {
namespace {

std::string Parent(const std::string& path) { return path.substr(0, path.find_last_of('/')); }

class DirFsyncTrace : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/shardpoint_dir_fsync_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    char real[PATH_MAX];
    ASSERT_NE(realpath(tmpl, real), nullptr);  // fsync logs resolved paths
    root_ = real;
  }
  void TearDown() override {
    Stop();
    EXPECT_TRUE(DefaultStorage()->RemoveAll(root_).ok());
  }

  void Start() {
    std::lock_guard<std::mutex> lock(g_mu);
    log_.clear();
    g_log = &log_;
  }
  std::vector<Call> Stop() {
    std::lock_guard<std::mutex> lock(g_mu);
    g_log = nullptr;
    return log_;
  }

  // Every directory created during the log has its parent fsynced after it.
  static void ExpectEveryCreatedDirDurable(const std::vector<Call>& log) {
    for (size_t i = 0; i < log.size(); ++i) {
      if (log[i].op != "mkdir") continue;
      const Call want{"fsync", Parent(log[i].path)};
      bool found = false;
      for (size_t j = i + 1; j < log.size() && !found; ++j) found = log[j] == want;
      EXPECT_TRUE(found) << "created " << log[i].path << " but never fsynced its parent "
                         << want.path << " afterwards; log:\n"
                         << ::testing::PrintToString(log);
    }
  }

  static State Rows(std::vector<float>* mem) {
    mem->resize(16);
    for (size_t i = 0; i < mem->size(); ++i) (*mem)[i] = static_cast<float>(i) * 0.5f;
    LocalTensor t;
    t.data = mem->data();
    t.shape = {4, 4};
    t.segments = {Segment{"w", {4, 4}, Box::Whole({4, 4}), {0, 0}}};
    State s;
    s.tensors.push_back(t);
    return s;
  }

  std::string root_;
  std::vector<Call> log_;
};

TEST_F(DirFsyncTrace, CreateDirsSyncsEachNewDirectorysParentTopDown) {
  Start();
  ASSERT_TRUE(DefaultStorage()->CreateDirs(root_ + "/n1/a/b").ok());
  std::vector<Call> log = Stop();
  const std::string n1 = root_ + "/n1";
  EXPECT_THAT(log, ::testing::ElementsAre(Call{"mkdir", n1}, Call{"fsync", root_},
                                          Call{"mkdir", n1 + "/a"}, Call{"fsync", n1},
                                          Call{"mkdir", n1 + "/a/b"}, Call{"fsync", n1 + "/a"}));
  // What exists costs nothing; only the new tail is created and synced.
  Start();
  ASSERT_TRUE(DefaultStorage()->CreateDirs(root_ + "/n1/a/b").ok());
  ASSERT_TRUE(DefaultStorage()->CreateDirs(root_ + "/n1/a/c/").ok());
  log = Stop();
  EXPECT_THAT(log, ::testing::ElementsAre(Call{"mkdir", n1 + "/a/c"}, Call{"fsync", n1 + "/a"}));
}

TEST_F(DirFsyncTrace, SaveIntoNewParentsLeavesThemDurable) {
  std::vector<float> mem;
  std::unique_ptr<Comm> comm = MakeSingleComm();
  Start();
  Result<SaveStats> saved = Save(Rows(&mem), root_ + "/n1/a/b/ck", *comm);
  std::vector<Call> log = Stop();
  ASSERT_TRUE(saved.ok()) << saved.status().ToString();
  ExpectEveryCreatedDirDurable(log);
  EXPECT_THAT(log, ::testing::Contains(Call{"fsync", root_}));  // n1's entry
}

TEST_F(DirFsyncTrace, ManagerRootAndCheckpointDurable) {
  std::vector<float> mem;
  std::unique_ptr<Comm> comm = MakeSingleComm();
  Start();
  Result<std::unique_ptr<CheckpointManager>> m =
      CheckpointManager::Open(root_ + "/jobs/run1", *comm);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_TRUE((*m)->Save(Rows(&mem), 1, *comm).ok());
  std::vector<Call> log = Stop();
  ExpectEveryCreatedDirDurable(log);
  EXPECT_THAT(log, ::testing::Contains(Call{"fsync", root_}));  // jobs' entry
}

TEST_F(DirFsyncTrace, ConvertToDcpIntoNewParentsLeavesThemDurable) {
  std::vector<float> mem;
  std::unique_ptr<Comm> comm = MakeSingleComm();
  ASSERT_TRUE(Save(Rows(&mem), root_ + "/src", *comm).ok());
  Start();
  Result<ExportHfStats> converted = ConvertToDcp(root_ + "/src", root_ + "/out/x/dcp", HfMapping{});
  std::vector<Call> log = Stop();
  ASSERT_TRUE(converted.ok()) << converted.status().ToString();
  ExpectEveryCreatedDirDurable(log);
  EXPECT_THAT(log, ::testing::Contains(Call{"fsync", root_}));  // out's entry
}

}  // namespace
}  // namespace shardpoint
