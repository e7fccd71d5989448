// CheckpointManager: iteration directories, the `latest` tracker, resume past
// a killed save, keep-last-N retention, and the lock between jobs.
#include "shardpoint/manager.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include "src/io/fault_storage.h"

namespace shardpoint {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// One rank holding "w" [2, 4] F32, every element `value`.
struct Tiny {
  std::vector<float> mem = std::vector<float>(8);
  State state;
  explicit Tiny(float value) {
    std::fill(mem.begin(), mem.end(), value);
    LocalTensor t;
    t.data = mem.data();
    t.shape = {2, 4};
    t.segments = {Segment{"w", {2, 4}, Box::Whole({2, 4}), {0, 0}}};
    state.tensors.push_back(t);
    state.common = "iteration";
  }
};

class ManagerTest : public ::testing::Test {
 protected:
  std::unique_ptr<CheckpointManager> Open(int keep_last, Storage* storage = nullptr) {
    ManagerOptions o;
    o.storage = storage ? storage : mem_.get();
    o.keep_last = keep_last;
    o.lock = false;
    auto m = CheckpointManager::Open("run", *comm_, o);
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    return std::move(*m);
  }
  void SaveAt(CheckpointManager& m, int64_t it) {
    Tiny t(static_cast<float>(it));
    Result<SaveStats> s = m.Save(t.state, it, *comm_);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
  }
  std::unique_ptr<Storage> mem_ = NewMemStorage();
  std::unique_ptr<Comm> comm_ = MakeSingleComm();
};

TEST_F(ManagerTest, IterationDirectoriesAndTracker) {
  auto m = Open(0);
  EXPECT_EQ(m->PathFor(100), "run/iter_0000100");
  EXPECT_FALSE(m->LatestComplete()->has_value());
  EXPECT_FALSE(m->Tracker()->has_value());
  SaveAt(*m, 100);
  SaveAt(*m, 200);
  EXPECT_THAT(*m->CompleteIterations(), ElementsAre(100, 200));
  EXPECT_EQ(**m->Tracker(), 200);
  EXPECT_EQ(*mem_->ReadFileToString("run/latest"), "200\n");
  EXPECT_FALSE(*mem_->Exists("run/latest.tmp"));
}

TEST_F(ManagerTest, ResumeIgnoresAKilledSaveNewerThanTheLatestComplete) {
  auto m = Open(0);
  SaveAt(*m, 100);
  SaveAt(*m, 200);
  // A save of 300 killed before its commit: data files, no manifest.
  ASSERT_TRUE(mem_->CreateDirs("run/iter_0000300/data").ok());
  ASSERT_TRUE(mem_->WriteStringToFile("run/iter_0000300/data/0.safetensors", "partial").ok());
  // And junk that is not an iteration.
  ASSERT_TRUE(mem_->CreateDirs("run/iter_0000400.partial").ok());
  ASSERT_TRUE(mem_->CreateDirs("run/notes").ok());

  EXPECT_EQ(**m->LatestComplete(), 200);
  Tiny loaded(0);
  Result<int64_t> it = m->Resume(loaded.state, *comm_);
  ASSERT_TRUE(it.ok()) << it.status().ToString();
  EXPECT_EQ(*it, 200);
  EXPECT_EQ(loaded.mem[5], 200.0f);

  // The directory of the killed save can be saved into again.
  SaveAt(*m, 300);
  EXPECT_EQ(**m->LatestComplete(), 300);
}

TEST_F(ManagerTest, ResumeWithoutCheckpointIsNotFound) {
  auto m = Open(0);
  Tiny loaded(0);
  Result<int64_t> it = m->Resume(loaded.state, *comm_);
  EXPECT_EQ(it.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(it.status().ToString(), HasSubstr("no complete checkpoint under 'run'"));
}

TEST_F(ManagerTest, RetentionKeepsTheNewestNAndRemovesKilledSaves) {
  auto m = Open(2);
  SaveAt(*m, 100);
  ASSERT_TRUE(mem_->CreateDirs("run/iter_0000150/data").ok());  // killed save
  SaveAt(*m, 200);
  EXPECT_THAT(*m->CompleteIterations(), ElementsAre(100, 200));
  SaveAt(*m, 300);
  EXPECT_THAT(*m->CompleteIterations(), ElementsAre(200, 300));
  EXPECT_FALSE(*mem_->Exists("run/iter_0000100"));
  EXPECT_FALSE(*mem_->Exists("run/iter_0000150"));
}

TEST_F(ManagerTest, FailedSaveNeverCostsTheNewestCompleteCheckpoint) {
  internal_io::FaultStorage faults(mem_.get());
  auto m = Open(1, &faults);
  SaveAt(*m, 100);
  faults.FailWritesFrom(faults.writes() + 1);
  Tiny t(2);
  Result<SaveStats> s = m->Save(t.state, 200, *comm_);
  EXPECT_FALSE(s.ok());
  faults.FailWritesFrom(0);
  EXPECT_THAT(*m->CompleteIterations(), ElementsAre(100));
  EXPECT_EQ(**m->Tracker(), 100);
  Tiny loaded(0);
  EXPECT_EQ(*m->Resume(loaded.state, *comm_), 100);
  EXPECT_EQ(loaded.mem[0], 100.0f);
}

TEST_F(ManagerTest, TrackerFailureSaysTheCheckpointCommitted) {
  internal_io::FaultStorage faults(mem_.get());
  auto m = Open(0, &faults);
  SaveAt(*m, 100);
  faults.FailRenameTo("/latest");
  Tiny t(2);
  Status s = m->Save(t.state, 200, *comm_).status();
  EXPECT_EQ(s.code(), StatusCode::kIOError);
  EXPECT_THAT(s.message(), HasSubstr("checkpoint 'run/iter_0000200' committed (it is complete "
                                     "and loads; resume finds it), but updating 'run/latest' "
                                     "failed: rename run/latest.tmp to run/latest"));
  EXPECT_EQ(**m->Tracker(), 100);
  Tiny loaded(0);
  EXPECT_EQ(*m->Resume(loaded.state, *comm_), 200);
  EXPECT_EQ(loaded.mem[0], 2.0f);
}

TEST_F(ManagerTest, AsyncSaveUpdatesTheTrackerAfterTheCommit) {
  auto m = Open(1);
  AsyncSaver saver;
  Tiny t(100);
  SaveHandle h = m->SaveAsync(saver, t.state, 100, *comm_);
  std::fill(t.mem.begin(), t.mem.end(), -1.0f);
  ASSERT_TRUE(h.Wait().ok()) << h.Wait().status().ToString();
  EXPECT_EQ(**m->Tracker(), 100);
  Tiny loaded(0);
  EXPECT_EQ(*m->Resume(loaded.state, *comm_), 100);
  EXPECT_EQ(loaded.mem[3], 100.0f);
}

// The lock needs a POSIX directory.
class ManagerLockTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/shardpoint_manager_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
  }
  void TearDown() override { ASSERT_TRUE(DefaultStorage()->RemoveAll(root_).ok()); }
  Result<std::unique_ptr<CheckpointManager>> OpenReal() {
    return CheckpointManager::Open(root_, *comm_, ManagerOptions{});
  }
  void WriteLock(const std::string& text) { std::ofstream(root_ + "/.lock") << text; }
  std::string root_;
  std::unique_ptr<Comm> comm_ = MakeSingleComm();
};

std::string Host() {
  char buf[256] = {};
  gethostname(buf, sizeof buf - 1);
  return buf;
}

TEST_F(ManagerLockTest, SecondJobGetsAClearErrorUntilTheFirstReleases) {
  auto first = OpenReal();
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  auto second = OpenReal();
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(second.status().ToString(), HasSubstr("locked by another job"));
  EXPECT_THAT(second.status().ToString(), HasSubstr("pid " + std::to_string(getpid())));
  EXPECT_THAT(second.status().ToString(), HasSubstr("host '" + Host() + "'"));
  EXPECT_THAT(second.status().ToString(), HasSubstr(root_ + "/.lock"));
  first->reset();
  auto third = OpenReal();
  EXPECT_TRUE(third.ok()) << third.status().ToString();
}

// A restarted container has the same host name and often the same pid (now
// its own): the lock file it finds names this very process, yet nothing holds
// it. A pid check would refuse it forever; the kernel lock is free.
TEST_F(ManagerLockTest, LockFileLeftByAnEarlierLifeOfThisPidIsTakenOver) {
  WriteLock("pid " + std::to_string(getpid()) + " host " + Host() + "\n");
  auto m = OpenReal();
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  m->reset();
  WriteLock("pid 1234 host some-other-node\n");  // another host's leftover: same
  m = OpenReal();
  EXPECT_TRUE(m.ok()) << m.status().ToString();
}

// The holder is killed: its lock is free at once, before anyone reaps it
// (mpirun's aborted ranks linger as zombies).
TEST_F(ManagerLockTest, LockOfAKilledHolderIsFreeWhileItIsAZombie) {
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  pid_t child = fork();
  if (child == 0) {
    std::unique_ptr<Comm> comm = MakeSingleComm();
    auto m = CheckpointManager::Open(root_, *comm, ManagerOptions{});
    char c = m.ok() ? 'y' : 'n';
    if (write(ready[1], &c, 1) != 1) _exit(2);
    pause();
    _exit(0);
  }
  ASSERT_GT(child, 0);
  close(ready[1]);
  char c = 0;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  close(ready[0]);
  ASSERT_EQ(c, 'y');
  auto held = OpenReal();
  ASSERT_FALSE(held.ok());
  EXPECT_THAT(held.status().ToString(), HasSubstr("pid " + std::to_string(child)));
  ASSERT_EQ(kill(child, SIGKILL), 0);
  siginfo_t info = {};
  ASSERT_EQ(waitid(P_PID, static_cast<id_t>(child), &info, WEXITED | WNOWAIT), 0);  // a zombie
  auto m = OpenReal();
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_EQ(waitpid(child, nullptr, 0), child);
}

TEST_F(ManagerLockTest, CloseReleasesTheLockAtOnceAndRefusesLaterSaves) {
  auto first = OpenReal();
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  ASSERT_TRUE((*first)->Close().ok());
  EXPECT_FALSE(*DefaultStorage()->Exists(root_ + "/.lock"));
  auto second = OpenReal();
  EXPECT_TRUE(second.ok()) << second.status().ToString();
  Tiny t(1);
  Result<SaveStats> s = (*first)->Save(t.state, 1, *comm_);
  EXPECT_EQ(s.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.status().message(), HasSubstr("closed"));
  EXPECT_TRUE((*first)->Close().ok());  // idempotent
}

TEST_F(ManagerLockTest, SavesLandInIterationDirectoriesOnDisk) {
  auto m = OpenReal();
  ASSERT_TRUE(m.ok());
  Tiny t(5);
  ASSERT_TRUE((*m)->Save(t.state, 7, *comm_).ok());
  EXPECT_TRUE(*DefaultStorage()->Exists(root_ + "/iter_0000007/manifest"));
  EXPECT_EQ(*DefaultStorage()->ReadFileToString(root_ + "/latest"), "7\n");
}

}  // namespace
}  // namespace shardpoint
