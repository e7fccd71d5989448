// A save's staging buffers come from the process-wide shelf and go back to
// it (src/io/raw_buffer.h): the next save or load faults nothing in for them
// (a first touch of fresh memory traps to the host in a VM), and each is at
// least 2 MiB, so that even a fresh one is one transparent huge page.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdint>
#include <string>
#include <vector>

#include "shardpoint/checkpoint.h"
#include "shardpoint/layout.h"
#include "shardpoint/storage.h"
#include "src/io/raw_buffer.h"
#include "tests/testing/seeded_floats.h"

namespace shardpoint {
namespace {

using internal_io::RawBuffer;

std::vector<RawBuffer> DrainShelf() {
  std::vector<RawBuffer> out;
  for (RawBuffer b = internal_io::TakeShelved(); b.capacity() > 0; b = internal_io::TakeShelved()) {
    out.push_back(std::move(b));
  }
  return out;
}

// A directory on the build tree's disk (O_DIRECT where /tmp is tmpfs),
// removed after the test whether it passed or not.
class StagingReuse : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_NE(mkdtemp(dir_), nullptr); }
  void TearDown() override { EXPECT_TRUE(DefaultStorage()->RemoveAll(dir_).ok()); }
  char dir_[32] = "./shardpoint_staging_XXXXXX";
};

TEST_F(StagingReuse, ASavesStagingBuffersGoBackToTheShelfAlignedForODirect) {
  std::vector<float> w = testing::SeededFloats(7, 3 << 20);  // 12 MiB: many staged writes
  State s;
  s.tensors = {WholeTensor("w", DType::kF32, w.data(), {3, 1 << 20})};
  std::unique_ptr<Comm> comm = MakeSingleComm();
  SaveOptions so;
  so.staging_bytes = 256 << 10;
  for (const std::string dir : {"/a", "/b"}) {
    DrainShelf();
    Result<SaveStats> saved = Save(s, std::string(dir_) + dir, *comm, so);
    ASSERT_TRUE(saved.ok()) << saved.status().ToString();
    std::vector<RawBuffer> shelved = DrainShelf();
    ASSERT_EQ(shelved.size(), 3u) << dir;  // the data file's three buffers
    for (const RawBuffer& b : shelved) {
      EXPECT_GE(b.capacity(), size_t{2} << 20);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % 4096, 0u);
    }
  }
  std::vector<float> back(w.size());
  State loaded;
  loaded.tensors = {WholeTensor("w", DType::kF32, back.data(), {3, 1 << 20})};
  ASSERT_TRUE(Load(loaded, std::string(dir_) + "/b", *comm, LoadOptions{}).ok());
  EXPECT_EQ(back, w);
}

}  // namespace
}  // namespace shardpoint
