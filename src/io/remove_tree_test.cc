// RemoveTree on the real filesystem under /tmp. What a network or FUSE
// filesystem does to a removed file that is still open (a new hidden name
// each time) is tested on a real sshfs mount: python/tests/test_network_fs.py.
#include "src/io/remove_tree.h"

#include <stdlib.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shardpoint::internal_io {
namespace {

using ::testing::HasSubstr;

class RemoveTreeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/shardpoint_remove_tree_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
  }
  void TearDown() override { EXPECT_TRUE(RemoveTree(root_).ok()); }

  void Write(const std::string& path, const std::string& text) {
    std::ofstream(path) << text;
    ASSERT_TRUE(Exists(path)) << path;
  }
  static bool Exists(const std::string& path) {
    struct stat st;
    return lstat(path.c_str(), &st) == 0;
  }

  std::string root_;
};

TEST_F(RemoveTreeTest, RemovesNestedDirectoriesFilesAndLinks) {
  const std::string ck = root_ + "/ck";
  ASSERT_EQ(mkdir(ck.c_str(), 0755), 0);
  ASSERT_EQ(mkdir((ck + "/data").c_str(), 0755), 0);
  ASSERT_EQ(mkdir((ck + "/data/deeper").c_str(), 0755), 0);
  Write(ck + "/manifest", "m");
  for (int i = 0; i < 50; ++i) Write(ck + "/data/" + std::to_string(i), "d");
  Write(ck + "/data/deeper/x", "x");
  ASSERT_EQ(symlink("/nonexistent", (ck + "/dangling").c_str()), 0);
  ASSERT_TRUE(RemoveTree(ck).ok());
  EXPECT_FALSE(Exists(ck));
  EXPECT_TRUE(RemoveTree(ck).ok()) << "a missing path is not an error";
}

TEST_F(RemoveTreeTest, NeverFollowsALinkToADirectory) {
  const std::string outside = root_ + "/outside";
  ASSERT_EQ(mkdir(outside.c_str(), 0755), 0);
  Write(outside + "/precious", "p");
  const std::string ck = root_ + "/ck";
  ASSERT_EQ(mkdir(ck.c_str(), 0755), 0);
  ASSERT_EQ(symlink(outside.c_str(), (ck + "/data").c_str()), 0);
  ASSERT_TRUE(RemoveTree(ck).ok());
  EXPECT_FALSE(Exists(ck));
  EXPECT_TRUE(Exists(outside + "/precious"));
  // A link given as the path itself is removed, not its target.
  ASSERT_EQ(symlink(outside.c_str(), (root_ + "/link").c_str()), 0);
  ASSERT_TRUE(RemoveTree(root_ + "/link").ok());
  EXPECT_FALSE(Exists(root_ + "/link"));
  EXPECT_TRUE(Exists(outside + "/precious"));
}

TEST_F(RemoveTreeTest, RemovesAPlainFile) {
  Write(root_ + "/f", "f");
  ASSERT_TRUE(RemoveTree(root_ + "/f").ok());
  EXPECT_FALSE(Exists(root_ + "/f"));
}

// An entry that cannot be removed (a mount point: EBUSY) is an IOError
// naming it; everything else is removed all the same, and the call returns.
TEST_F(RemoveTreeTest, AnEntryThatCannotGoIsNamedAndTheRestIsRemoved) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to mount a tmpfs";
  const std::string ck = root_ + "/ck";
  ASSERT_EQ(mkdir(ck.c_str(), 0755), 0);
  ASSERT_EQ(mkdir((ck + "/a_busy").c_str(), 0755), 0);
  for (int i = 0; i < 5; ++i) Write(ck + "/f" + std::to_string(i), "d");
  if (mount("tmpfs", (ck + "/a_busy").c_str(), "tmpfs", 0, "size=64k") != 0) {
    GTEST_SKIP() << "cannot mount a tmpfs";
  }
  Status s = RemoveTree(ck);
  EXPECT_EQ(s.code(), StatusCode::kIOError);
  EXPECT_THAT(s.message(), HasSubstr(ck + "/a_busy"));
  for (int i = 0; i < 5; ++i) EXPECT_FALSE(Exists(ck + "/f" + std::to_string(i)));
  ASSERT_EQ(umount((ck + "/a_busy").c_str()), 0);
  EXPECT_TRUE(RemoveTree(ck).ok());
  EXPECT_FALSE(Exists(ck));
}

// On NFS a removed file that is still open becomes .nfsXXXX, whose removal
// fails with EBUSY: the error says what such a name means. (A busy mount
// point under that name gives the same EBUSY here.)
TEST_F(RemoveTreeTest, ABusyNfsLeftoverIsExplained) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to mount a tmpfs";
  const std::string ck = root_ + "/ck";
  ASSERT_EQ(mkdir(ck.c_str(), 0755), 0);
  const std::string held = ck + "/.nfs000000000123abcd00000001";
  ASSERT_EQ(mkdir(held.c_str(), 0755), 0);
  if (mount("tmpfs", held.c_str(), "tmpfs", 0, "size=64k") != 0) {
    GTEST_SKIP() << "cannot mount a tmpfs";
  }
  Status s = RemoveTree(ck);
  EXPECT_EQ(s.code(), StatusCode::kIOError);
  EXPECT_THAT(s.message(), HasSubstr(held + ": Device or resource busy"));
  EXPECT_THAT(s.message(), HasSubstr("some process still holds open"));
  ASSERT_EQ(umount(held.c_str()), 0);
  EXPECT_TRUE(RemoveTree(ck).ok());
}

}  // namespace
}  // namespace shardpoint::internal_io
