// Removing a checkpoint (retention, and the old checkpoint of an overwrite)
// never leaves a directory that looks complete without its data, wherever the
// process dies, in whatever order the filesystem lists the entries.
//
// In memory: a storage that removes trees one entry at a time in the worst
// order (every entry before `manifest`, as ext4's hash order may) and whose
// process dies at step k, for every k; after each death, and after a power
// loss on top of it, every directory holding a manifest verifies and the
// newest complete checkpoint loads bit for bit. On disk (root only): the same
// retention on a loop-mounted ext4 whose hash order lists data/ first.
#include <dirent.h>
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <functional>

#include "shardpoint/checkpoint.h"
#include "shardpoint/manager.h"
#include "src/checkpoint/verify.h"
#include "src/io/mem_storage.h"
#include "src/io/path.h"

namespace shardpoint {
namespace {

using internal_io::JoinPath;

// One rank holding "w" [4, 4] F32, every element `value`.
struct Filled {
  std::vector<float> mem = std::vector<float>(16);
  State state;
  explicit Filled(float value) {
    std::fill(mem.begin(), mem.end(), value);
    LocalTensor t;
    t.data = mem.data();
    t.shape = {4, 4};
    t.segments = {Segment{"w", {4, 4}, Box::Whole({4, 4}), {0, 0}}};
    state.tensors.push_back(t);
  }
};

// Dies at the k-th mutating call after Arm(): that call and every later call
// (reads included) fail, as nothing more happens in a killed process. Removes
// trees entry by entry, `manifest` last in each directory. With
// exchange = false, Exchange is refused (the rename fallback of overwrite).
class DyingStorage : public StorageWrapper {
 public:
  DyingStorage(Storage* base, bool exchange) : StorageWrapper(base), exchange_(exchange) {}
  void Arm(int64_t die_at) { die_at_ = die_at, steps_ = 0; }
  bool died() const { return died_; }

  Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path,
                                                        const WriteFileOptions& o) override {
    SP_RETURN_IF_ERROR(Step());
    return StorageWrapper::NewWritableFile(path, o);
  }
  Result<std::unique_ptr<ReadableFile>> NewReadableFile(const std::string& path) override {
    SP_RETURN_IF_ERROR(Alive());
    return StorageWrapper::NewReadableFile(path);
  }
  Status CreateDirs(const std::string& path) override {
    SP_RETURN_IF_ERROR(Step());
    return StorageWrapper::CreateDirs(path);
  }
  Status SyncDir(const std::string& path) override {
    SP_RETURN_IF_ERROR(Step());
    return StorageWrapper::SyncDir(path);
  }
  Status Rename(const std::string& from, const std::string& to) override {
    SP_RETURN_IF_ERROR(Step());
    return StorageWrapper::Rename(from, to);
  }
  Result<bool> Exchange(const std::string& a, const std::string& b) override {
    if (!exchange_) return false;
    SP_RETURN_IF_ERROR(Step());
    return StorageWrapper::Exchange(a, b);
  }
  Status RemoveFile(const std::string& path) override {
    SP_RETURN_IF_ERROR(Step());
    return StorageWrapper::RemoveFile(path);
  }
  Status RemoveAll(const std::string& path) override {
    SP_RETURN_IF_ERROR(Alive());
    SP_ASSIGN_OR_RETURN(bool exists, base()->Exists(path));
    if (!exists) return OkStatus();
    SP_ASSIGN_OR_RETURN(bool dir, base()->IsDirectory(path));
    if (!dir) return RemoveFile(path);
    SP_ASSIGN_OR_RETURN(std::vector<std::string> names, base()->ListDir(path));
    std::stable_partition(names.begin(), names.end(),
                          [](const std::string& n) { return n != "manifest"; });
    for (const std::string& name : names) SP_RETURN_IF_ERROR(RemoveAll(JoinPath(path, name)));
    SP_RETURN_IF_ERROR(Step());
    return StorageWrapper::RemoveAll(path);  // now empty
  }
  Result<bool> Exists(const std::string& path) override {
    SP_RETURN_IF_ERROR(Alive());
    return StorageWrapper::Exists(path);
  }
  Result<std::vector<std::string>> ListDir(const std::string& path) override {
    SP_RETURN_IF_ERROR(Alive());
    return StorageWrapper::ListDir(path);
  }

 private:
  Status Alive() const { return died_ ? IOError("process killed (simulated)") : OkStatus(); }
  Status Step() {
    SP_RETURN_IF_ERROR(Alive());
    if (die_at_ > 0 && ++steps_ >= die_at_) died_ = true;
    return Alive();
  }
  const bool exchange_;
  int64_t die_at_ = 0;
  int64_t steps_ = 0;
  bool died_ = false;
};

// Every directory under `root` (recursively) that holds a manifest verifies.
void ExpectEveryManifestVerifies(Storage* storage, const std::string& root,
                                 const std::string& when) {
  Result<std::vector<std::string>> names = storage->ListDir(root);
  ASSERT_TRUE(names.ok()) << names.status().ToString();
  for (const std::string& name : *names) {
    const std::string path = JoinPath(root, name);
    if (!*storage->IsDirectory(path)) continue;
    if (*storage->Exists(JoinPath(path, "manifest"))) {
      Result<internal_checkpoint::VerifyReport> report =
          internal_checkpoint::VerifyCheckpoint(storage, path);
      ASSERT_TRUE(report.ok()) << when << ": " << report.status().ToString();
      EXPECT_TRUE(report->ok()) << when << ": " << path << " has a manifest but fails verify: "
                                << (report->faults.empty() ? "" : report->faults[0].message);
    }
    ExpectEveryManifestVerifies(storage, path, when);
  }
}

// `dir` holds a complete checkpoint whose "w" is all `value`.
void ExpectLoads(Storage* storage, const std::string& dir, float value, const std::string& when) {
  Filled got(-1);
  LoadOptions o;
  o.storage = storage;
  std::unique_ptr<Comm> comm = MakeSingleComm();
  Result<LoadResult> r = Load(got.state, dir, *comm, o);
  ASSERT_TRUE(r.ok()) << when << ": " << r.status().ToString();
  EXPECT_EQ(got.mem, Filled(value).mem) << when;
}

TEST(RemovalCrashTest, RetentionKilledAtEveryStepLeavesOnlyCompleteCheckpoints) {
  int64_t k = 1;
  for (;; ++k) {
    const std::string when = "killed at step " + std::to_string(k);
    std::unique_ptr<Storage> mem = NewMemStorage();
    DyingStorage dying(mem.get(), /*exchange=*/true);
    std::unique_ptr<Comm> comm = MakeSingleComm();
    ManagerOptions o;
    o.storage = &dying;
    o.keep_last = 1;
    auto m = CheckpointManager::Open("run", *comm, o);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    ASSERT_TRUE((*m)->Save(Filled(1).state, 1, *comm).ok());
    ASSERT_TRUE(mem->SyncDir("/").ok());  // "run" itself durable (CreateDirs does not sync)
    dying.Arm(k);
    Status s = (*m)->Save(Filled(2).state, 2, *comm).status();
    if (!dying.died()) {
      ASSERT_TRUE(s.ok()) << s.ToString();
      EXPECT_FALSE(*mem->Exists("run/iter_0000001"));
      break;
    }
    for (bool power_loss : {false, true}) {
      if (power_loss) static_cast<internal_io::MemStorage*>(mem.get())->SimulateCrash();
      const std::string w = when + (power_loss ? " then power loss" : "");
      ExpectEveryManifestVerifies(mem.get(), "run", w);
      ManagerOptions plain;
      plain.storage = mem.get();
      plain.lock = false;
      auto after = CheckpointManager::Open("run", *comm, plain);
      ASSERT_TRUE(after.ok());
      Result<std::optional<int64_t>> latest = (*after)->LatestComplete();
      ASSERT_TRUE(latest.ok() && latest->has_value()) << w << ": no complete checkpoint left";
      ExpectLoads(mem.get(), (*after)->PathFor(**latest), static_cast<float>(**latest), w);
    }
    if (HasFailure()) break;
  }
  EXPECT_GT(k, 10);  // the kill points did cover the save and the retention
}

class OverwriteCrashTest : public ::testing::TestWithParam<bool> {};

TEST_P(OverwriteCrashTest, OverwriteKilledAtEveryStepLeavesOnlyCompleteCheckpoints) {
  int64_t k = 1;
  for (;; ++k) {
    const std::string when = "killed at step " + std::to_string(k);
    std::unique_ptr<Storage> mem = NewMemStorage();
    DyingStorage dying(mem.get(), /*exchange=*/GetParam());
    std::unique_ptr<Comm> comm = MakeSingleComm();
    SaveOptions o;
    o.storage = &dying;
    ASSERT_TRUE(Save(Filled(1).state, "run/ck", *comm, o).ok());
    ASSERT_TRUE(mem->SyncDir("/").ok());  // "run" itself durable (CreateDirs does not sync)
    dying.Arm(k);
    o.overwrite = true;
    Status s = Save(Filled(2).state, "run/ck", *comm, o).status();
    if (!dying.died()) {
      ASSERT_TRUE(s.ok()) << s.ToString();
      ExpectLoads(mem.get(), "run/ck", 2, "after the overwrite");
      EXPECT_EQ(*mem->ListDir("run"), std::vector<std::string>{"ck"});
      break;
    }
    for (bool power_loss : {false, true}) {
      if (power_loss) static_cast<internal_io::MemStorage*>(mem.get())->SimulateCrash();
      const std::string w = when + (power_loss ? " then power loss" : "");
      ExpectEveryManifestVerifies(mem.get(), "run", w);
      if (*mem->Exists("run/ck/manifest")) {
        Filled got(-1);
        LoadOptions lo;
        lo.storage = mem.get();
        ASSERT_TRUE(Load(got.state, "run/ck", *comm, lo).ok()) << w;
        EXPECT_TRUE(got.mem == Filled(1).mem || got.mem == Filled(2).mem) << w;
      }
    }
    if (HasFailure()) break;
  }
  EXPECT_GT(k, 10);
}

INSTANTIATE_TEST_SUITE_P(ExchangeOrRenames, OverwriteCrashTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "Exchange" : "RenameFallback";
                         });

// A real ext4 on a loop device, made with a directory hash seed under which
// readdir lists data/ before manifest. The removal is stopped where the
// filesystem's own order reaches the manifest (made immutable, so its unlink
// fails as if the process had died just before it): a removal that trusts
// readdir order has already deleted the data by then.
class Ext4RemovalTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root to mount a loop device";
    char tmpl[] = "/tmp/shardpoint_ext4_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    image_ = dir_ + "/image";
    mnt_ = dir_ + "/mnt";
    // Seed 4: readdir of {data, manifest} gives data first (checked below).
    const std::string cmd =
        "truncate -s 16M " + image_ + " && mkdir " + mnt_ +
        " && mkfs.ext4 -q -F -E hash_seed=00000000-0000-0000-0000-000000000004 " + image_ +
        " >/dev/null 2>&1 && mount -o loop " + image_ + " " + mnt_ + " 2>/dev/null";
    if (std::system(cmd.c_str()) != 0) {
      GTEST_SKIP() << "cannot make and loop-mount an ext4 image (no mkfs.ext4 or loop device)";
    }
    mounted_ = true;
  }
  void TearDown() override {
    if (mounted_) {
      EXPECT_EQ(umount(mnt_.c_str()), 0);
    }
    if (!dir_.empty()) {
      EXPECT_TRUE(DefaultStorage()->RemoveAll(dir_).ok());
    }
  }
  std::string dir_, image_, mnt_;
  bool mounted_ = false;
};

std::vector<std::string> ReaddirOrder(const std::string& path) {
  std::vector<std::string> names;
  DIR* d = opendir(path.c_str());
  if (d == nullptr) return names;
  while (dirent* e = readdir(d)) {
    std::string n = e->d_name;
    if (n != "." && n != "..") names.push_back(n);
  }
  closedir(d);
  return names;
}

bool SetImmutable(const std::string& path, bool on) {
  int fd = open(path.c_str(), O_RDONLY);
  if (fd < 0) return false;
  int flags = 0;
  bool ok = ioctl(fd, FS_IOC_GETFLAGS, &flags) == 0;
  flags = on ? (flags | FS_IMMUTABLE_FL) : (flags & ~FS_IMMUTABLE_FL);
  ok = ok && ioctl(fd, FS_IOC_SETFLAGS, &flags) == 0;
  close(fd);
  return ok;
}

TEST_F(Ext4RemovalTest, RetentionInterruptedAtTheManifestLeavesACompleteCheckpoint) {
  const std::string root = mnt_ + "/run";
  std::unique_ptr<Comm> comm = MakeSingleComm();
  ManagerOptions o;
  o.keep_last = 1;
  auto m = CheckpointManager::Open(root, *comm, o);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_TRUE((*m)->Save(Filled(1).state, 1, *comm).ok());
  const std::string old = (*m)->PathFor(1);
  ASSERT_EQ(ReaddirOrder(old), (std::vector<std::string>{"data", "manifest"}))
      << "the hash seed no longer lists data/ first";
  ASSERT_TRUE(SetImmutable(JoinPath(old, "manifest"), true));
  Status s = (*m)->Save(Filled(2).state, 2, *comm).status();
  EXPECT_FALSE(s.ok());  // retention could not remove iter 1's manifest
  ASSERT_TRUE(SetImmutable(JoinPath(old, "manifest"), false));
  ExpectEveryManifestVerifies(DefaultStorage(), root, "after the interrupted retention");
  ExpectLoads(DefaultStorage(), old, 1, "the checkpoint retention could not remove");
  ExpectLoads(DefaultStorage(), (*m)->PathFor(2), 2, "the new checkpoint");
}

}  // namespace
}  // namespace shardpoint
