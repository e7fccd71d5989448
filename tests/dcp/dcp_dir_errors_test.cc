// A DCP directory with damage (copies of the committed fixture in memory):
// every fault is a typed error naming the file or item, never a crash.
#include <gtest/gtest.h>

#include "shardpoint/checkpoint.h"
#include "shardpoint/comm.h"
#include "src/dcp/dcp_dir.h"

using shardpoint::internal_dcp::ReadDcpIndex;

namespace shardpoint {
namespace {

// The committed fixture: beside this file (__FILE__ is relative to the build
// directory under ccache's base dir), or under the working directory.
std::string Fixture() {
  std::string f = __FILE__;
  std::string dir =
      f.substr(0, f.rfind("/tests/dcp/")) + "/tests/dcp/fixtures/" + "torch113_2ranks";
  Result<bool> here = DefaultStorage()->Exists(dir + "/.metadata");
  if (!here.ok() || !*here) {
    dir = "tests/dcp/fixtures/" + std::string("torch113_2ranks");
  }
  return dir;
}

class DcpDirErrorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    mem_ = NewMemStorage();
    ASSERT_TRUE(mem_->CreateDirs("ck").ok());
    Result<std::vector<std::string>> names = DefaultStorage()->ListDir(Fixture());
    ASSERT_TRUE(names.ok());
    for (const std::string& n : *names) {
      Result<std::string> b = DefaultStorage()->ReadFileToString(Fixture() + "/" + n);
      ASSERT_TRUE(b.ok());
      files_[n] = *b;
    }
  }
  Status Index() {
    for (const auto& [n, b] : files_) {
      SP_RETURN_IF_ERROR(mem_->WriteStringToFile("ck/" + n, b));
    }
    return ReadDcpIndex(mem_.get(), "ck").status();
  }
  void Replace(const std::string& file, const std::string& from, const std::string& to) {
    ASSERT_EQ(from.size(), to.size());
    const size_t at = files_[file].find(from);
    ASSERT_NE(at, std::string::npos) << from;
    files_[file].replace(at, from.size(), to);
  }
  void ExpectError(StatusCode code, const std::string& text) {
    Status s = Index();
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.code(), code) << s.ToString();
    EXPECT_NE(s.ToString().find(text), std::string::npos) << s.ToString();
  }
  std::unique_ptr<Storage> mem_;
  std::map<std::string, std::string> files_;
};

TEST_F(DcpDirErrorsTest, IntactCopyIndexes) { EXPECT_TRUE(Index().ok()); }

TEST_F(DcpDirErrorsTest, MissingDistcpFileNamesIt) {
  files_.erase("__1_0.distcp");
  ExpectError(StatusCode::kNotFound, "__1_0.distcp");
}

TEST_F(DcpDirErrorsTest, TruncatedDistcpFile) {
  files_["__1_0.distcp"].resize(100);
  ExpectError(StatusCode::kDataLoss, "lie past its end");
}

TEST_F(DcpDirErrorsTest, DamagedZipInsideAnItemNamesTheChunk) {
  std::string& f = files_["__1_0.distcp"];
  f[f.size() - 22] = 'X';  // the end of central directory signature
  ExpectError(StatusCode::kDataLoss, "'w' chunk [3:5, 0:3]");
}

TEST_F(DcpDirErrorsTest, RelativePathOutsideTheDirectory) {
  Replace(".metadata", "__0_0.distcp", "../_0.distcp");
  ExpectError(StatusCode::kDataLoss, "not a plain name");
}

TEST_F(DcpDirErrorsTest, TruncatedMetadata) {
  files_[".metadata"].resize(files_[".metadata"].size() / 2);
  ExpectError(StatusCode::kDataLoss, ".metadata");
}

TEST_F(DcpDirErrorsTest, ForbiddenClassInMetadata) {
  Replace(".metadata", "getattr", "exec___");
  ExpectError(StatusCode::kFailedPrecondition, "'builtins.exec___'");
}

TEST_F(DcpDirErrorsTest, MetadataOfAnotherClass) {
  Replace(".metadata", "Metadata\x94", "Matadata\x94");
  ExpectError(StatusCode::kFailedPrecondition, "Matadata");
}

TEST_F(DcpDirErrorsTest, SavedTensorOfAnotherDtype) {
  // The int64 item claims an int32 storage: the metadata disagrees.
  bool changed = false;
  for (auto& [n, b] : files_) {
    const size_t at = b.find("torch\nLongStorage\n");
    if (at == std::string::npos) continue;
    b.replace(at, 18, "torch\nIntStorag\n\n\n");
    changed = true;
  }
  ASSERT_TRUE(changed);
  Status s = Index();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.ToString().find("'idx'"), std::string::npos) << s.ToString();
}

TEST_F(DcpDirErrorsTest, LoadAgreesOnTheErrorOnEveryRank) {
  files_["__1_0.distcp"].resize(100);
  for (const auto& [n, b] : files_) ASSERT_TRUE(mem_->WriteStringToFile("ck/" + n, b).ok());
  std::vector<float> w(15);
  std::vector<Status> all = RunThreadRanks(2, [&](Comm& comm) -> Status {
    State st;
    LocalTensor t;
    t.dtype = DType::kF32;
    t.shape = {5, 3};
    t.data = w.data();
    t.segments.push_back({"w", {5, 3}, Box::Whole({5, 3}), {0, 0}});
    if (comm.rank() == 0) st.tensors.push_back(t);
    LoadOptions o;
    o.storage = mem_.get();
    o.allow_unexpected_keys = true;
    return Load(st, "ck", comm, o).status();
  });
  for (const Status& s : all) {
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.ToString().find("__1_0.distcp"), std::string::npos) << s.ToString();
  }
}

}  // namespace
}  // namespace shardpoint
