// An overwrite on a filesystem without RENAME_EXCHANGE, killed between its
// two renames (`dir` -> `dir.old`, then `dir.partial` -> `dir`), leaves no
// `dir` and two complete checkpoints. The next load, or the next save, of
// `dir` completes the swap: exactly one committed checkpoint, the new one,
// and no leftovers. Public API on an in-memory storage.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>

#include "shardpoint/checkpoint.h"
#include "shardpoint/comm.h"

namespace shardpoint {
namespace {

// One rank holding "w" [8] F32, every element `value`.
struct Filled {
  std::vector<float> mem = std::vector<float>(8);
  State state;
  explicit Filled(float value) {
    std::fill(mem.begin(), mem.end(), value);
    LocalTensor t;
    t.data = mem.data();
    t.shape = {8};
    t.segments = {Segment{"w", {8}, Box::Whole({8}), {0}}};
    state.tensors.push_back(t);
  }
};

// No RENAME_EXCHANGE, and the process "dies" at the rename of `dir.partial`
// to `dir` (that rename and every later mutation fail).
class DiesBetweenTheRenames : public StorageWrapper {
 public:
  using StorageWrapper::StorageWrapper;
  Result<bool> Exchange(const std::string&, const std::string&) override { return false; }
  Status Rename(const std::string& from, const std::string& to) override {
    if (from.ends_with(".partial") && !to.ends_with(".partial")) dead_ = true;
    if (dead_) return IOError("killed");
    return StorageWrapper::Rename(from, to);
  }
  Status SyncDir(const std::string& p) override {
    return dead_ ? IOError("killed") : StorageWrapper::SyncDir(p);
  }
  Status RemoveAll(const std::string& p) override {
    return dead_ ? IOError("killed") : StorageWrapper::RemoveAll(p);
  }
  Status RemoveFile(const std::string& p) override {
    return dead_ ? IOError("killed") : StorageWrapper::RemoveFile(p);
  }

 private:
  bool dead_ = false;
};

class OverwriteRecoveryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Filled v1(1.0f);
    SaveOptions o;
    o.storage = mem_.get();
    ASSERT_TRUE(Save(v1.state, "ck", *comm_, o).ok());
    DiesBetweenTheRenames dying(mem_.get());
    Filled v2(2.0f);
    o.storage = &dying;
    o.overwrite = true;
    ASSERT_FALSE(Save(v2.state, "ck", *comm_, o).ok());
    // The state the kill left: no `ck`, the old checkpoint and the new one.
    ASSERT_FALSE(mem_->Exists("ck").value());
    ASSERT_TRUE(mem_->Exists("ck.old/manifest").value());
    ASSERT_TRUE(mem_->Exists("ck.partial/manifest").value());
  }
  void ExpectOnlyTheNewCheckpoint() {
    Filled got(0.0f);
    LoadOptions lo;
    lo.storage = mem_.get();
    Result<LoadResult> r = Load(got.state, "ck", *comm_, lo);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(got.mem, std::vector<float>(8, 2.0f));
    EXPECT_FALSE(mem_->Exists("ck.old").value());
    EXPECT_FALSE(mem_->Exists("ck.partial").value());
  }
  std::unique_ptr<Storage> mem_ = NewMemStorage();
  std::unique_ptr<Comm> comm_ = MakeSingleComm();
};

TEST_F(OverwriteRecoveryTest, TheNextLoadCompletesTheSwap) { ExpectOnlyTheNewCheckpoint(); }

TEST_F(OverwriteRecoveryTest, TheNextSaveCompletesTheSwapThenRefusesOrOverwrites) {
  Filled v3(3.0f);
  SaveOptions o;
  o.storage = mem_.get();
  Result<SaveStats> refused = Save(v3.state, "ck", *comm_, o);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition)
      << refused.status().ToString();
  ExpectOnlyTheNewCheckpoint();
  o.overwrite = true;
  ASSERT_TRUE(Save(v3.state, "ck", *comm_, o).ok());
  Filled got(0.0f);
  LoadOptions lo;
  lo.storage = mem_.get();
  ASSERT_TRUE(Load(got.state, "ck", *comm_, lo).ok());
  EXPECT_EQ(got.mem, std::vector<float>(8, 3.0f));
}

}  // namespace
}  // namespace shardpoint
