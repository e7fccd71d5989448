// A failed save gives back the space it took: after ENOSPC on a nearly full
// disk, later saves that fit still succeed.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cstdlib>
#include <functional>

#include "shardpoint/checkpoint.h"
#include "src/io/fault_storage.h"

namespace shardpoint {
namespace {

using ::testing::HasSubstr;

// Rank r of `ranks` holds rows [r * rows, (r + 1) * rows) of "w" [ranks *
// rows, 1024] F32 (4 KiB a row).
struct Rows {
  std::vector<float> mem;
  State state;
  Rows(int r, int ranks, int64_t rows) : mem(static_cast<size_t>(rows) * 1024, 1.0f + r) {
    LocalTensor t;
    t.data = mem.data();
    t.shape = {rows, 1024};
    t.segments = {Segment{"w", {ranks * rows, 1024}, Box({r * rows, 0}, {rows, 1024}), {0, 0}}};
    state.tensors.push_back(t);
  }
};

std::vector<Status> SaveRanks(int ranks, int64_t rows, const std::string& dir, Storage* storage,
                              std::vector<std::string>* log = nullptr) {
  return RunThreadRanks(ranks, [&](Comm& comm) {
    Rows mine(comm.rank(), ranks, rows);
    SaveOptions o;
    o.storage = storage;
    o.direct_io = false;
    if (log && comm.rank() == 0) o.log = [log](const std::string& line) { log->push_back(line); };
    return Save(mine.state, dir, comm, o).status();
  });
}

TEST(FailedSaveSpaceTest, FailedSaveRemovesTheFilesItWrote) {
  std::unique_ptr<Storage> mem = NewMemStorage();
  internal_io::FaultStorage faults(mem.get());
  faults.FailWritesFrom(3);  // rank files are written, then the disk is "full"
  std::vector<std::string> log;
  std::vector<Status> st = SaveRanks(3, 64, "/run/ck", &faults, &log);
  for (const Status& s : st) EXPECT_FALSE(s.ok());
  EXPECT_THAT(st[0].message(), HasSubstr("No space left on device (injected)"));
  EXPECT_FALSE(*mem->Exists("/run/ck/data"));
  EXPECT_FALSE(*mem->Exists("/run/ck/manifest.tmp"));
  ASSERT_EQ(log.size(), 1u);
  EXPECT_THAT(log[0], HasSubstr("FAILED"));
  EXPECT_THAT(log[0], HasSubstr("its files were removed"));
  // An overwrite that fails removes its .partial and keeps the old checkpoint.
  faults.FailWritesFrom(0);
  ASSERT_TRUE(SaveRanks(3, 64, "/run/ck", &faults)[0].ok());
  faults.FailWritesFrom(faults.writes() + 2);
  std::vector<Status> again = RunThreadRanks(3, [&](Comm& comm) {
    Rows mine(comm.rank(), 3, 64);
    SaveOptions o;
    o.storage = &faults;
    o.overwrite = true;
    return Save(mine.state, "/run/ck", comm, o).status();
  });
  EXPECT_FALSE(again[0].ok());
  EXPECT_FALSE(*mem->Exists("/run/ck.partial"));
  EXPECT_TRUE(*mem->Exists("/run/ck/manifest"));
  EXPECT_TRUE(*mem->Exists("/run/ck/data/2.safetensors"));
}

// A real, small tmpfs (root only): two saves too large for it fail, then a
// save that fits succeeds. Without the cleanup the first failure's files fill
// the disk for good.
TEST(FailedSaveSpaceTest, NearlyFullTmpfsRecoversAfterFailedSaves) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to mount a tmpfs";
  char tmpl[] = "/tmp/shardpoint_tmpfs_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string mnt = tmpl;
  if (mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=1m") != 0) {
    rmdir(mnt.c_str());
    GTEST_SKIP() << "cannot mount a tmpfs";
  }
  {
    // 2 ranks x 640 KiB: does not fit in 1 MiB.
    for (int64_t it : {1, 2}) {
      std::vector<Status> st =
          SaveRanks(2, 160, mnt + "/iter_" + std::to_string(it), DefaultStorage());
      EXPECT_FALSE(st[0].ok());
      EXPECT_THAT(st[0].message(), HasSubstr("No space left on device"));
    }
    // 2 ranks x 256 KiB fits in 1 MiB, but not beside 640 KiB of leftovers.
    std::vector<Status> st = SaveRanks(2, 64, mnt + "/iter_3", DefaultStorage());
    EXPECT_TRUE(st[0].ok()) << st[0].ToString();
    EXPECT_TRUE(*DefaultStorage()->Exists(mnt + "/iter_3/manifest"));
  }
  EXPECT_EQ(umount(mnt.c_str()), 0);
  rmdir(mnt.c_str());
}

}  // namespace
}  // namespace shardpoint
