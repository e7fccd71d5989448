// A buffered data file takes large contiguous tensors straight from the
// caller's memory (no staging copy); O_DIRECT files always go through the
// aligned staging buffers. Either way the checkpoint loads back bit for bit.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "shardpoint/checkpoint.h"
#include "shardpoint/layout.h"
#include "shardpoint/storage.h"
#include "tests/testing/recording_storage.h"
#include "tests/testing/seeded_floats.h"

namespace shardpoint {
namespace {

// big: 2 MiB contiguous; small: 64 bytes; strided: a [256, 512] column block
// of a [256, 1024] buffer (not contiguous).
struct Tensors {
  std::vector<float> big = testing::SeededFloats(1, 512 * 1024),
                     small = testing::SeededFloats(2, 16),
                     wide = testing::SeededFloats(3, 256 * 1024);
  State state() {
    State s;
    LocalTensor strided = WholeTensor("strided", DType::kF32, wide.data() + 7, {256, 512});
    strided.strides = {1024, 1};
    s.tensors = {WholeTensor("big", DType::kF32, big.data(), {512, 1024}),
                 WholeTensor("small", DType::kF32, small.data(), {16}), strided};
    return s;
  }
};

void SaveAndCheck(Storage* base, const std::string& dir, bool direct, uint64_t* in_source,
                  bool* was_direct) {
  Tensors t;
  testing::RecordingStorage watch(base, nullptr);
  watch.WatchWritesFrom(t.big.data(), t.big.data() + t.big.size());
  SaveOptions so;
  so.storage = &watch;
  so.direct_io = direct;
  so.staging_bytes = 256 << 10;
  std::unique_ptr<Comm> comm = MakeSingleComm();
  Result<SaveStats> saved = Save(t.state(), dir, *comm, so);
  ASSERT_TRUE(saved.ok()) << saved.status().ToString();
  *in_source = watch.bytes_written_from_watched();
  *was_direct = watch.any_direct();

  std::vector<float> big(t.big.size()), small(t.small.size()), strided(256 * 512);
  State back;
  back.tensors = {WholeTensor("big", DType::kF32, big.data(), {512, 1024}),
                  WholeTensor("small", DType::kF32, small.data(), {16}),
                  WholeTensor("strided", DType::kF32, strided.data(), {256, 512})};
  LoadOptions lo;
  lo.storage = base;
  Result<LoadResult> loaded = Load(back, dir, *comm, lo);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(std::memcmp(big.data(), t.big.data(), big.size() * 4), 0);
  EXPECT_EQ(std::memcmp(small.data(), t.small.data(), small.size() * 4), 0);
  for (int r = 0; r < 256; ++r) {
    ASSERT_EQ(std::memcmp(strided.data() + r * 512, t.wide.data() + 7 + r * 1024, 512 * 4), 0)
        << "row " << r;
  }
}

TEST(InPlaceWrite, BufferedFileTakesTheLargeContiguousTensorFromTheSource) {
  std::unique_ptr<Storage> mem = NewMemStorage();
  uint64_t in_source = 0;
  bool direct = true;
  SaveAndCheck(mem.get(), "/ckpt", /*direct=*/false, &in_source, &direct);
  EXPECT_FALSE(direct);
  EXPECT_EQ(in_source, 512u * 1024 * 4);  // all of "big", none of the others
}

// A mid-sized contiguous tensor (128 KiB, such as one TP shard of a small
// layer) is written from the caller's memory too, not gathered into staging;
// the small tensors around it still share a staged write.
TEST(InPlaceWrite, BufferedFileTakesAMidSizedContiguousTensorFromTheSource) {
  std::unique_ptr<Storage> mem = NewMemStorage();
  std::vector<float> before = testing::SeededFloats(4, 16), mid = testing::SeededFloats(5, 32768),
                     after = testing::SeededFloats(6, 16);
  State s;
  s.tensors = {WholeTensor("a", DType::kF32, before.data(), {16}),
               WholeTensor("mid", DType::kF32, mid.data(), {32768}),
               WholeTensor("z", DType::kF32, after.data(), {16})};
  testing::RecordingStorage watch(mem.get(), nullptr);
  watch.WatchWritesFrom(mid.data(), mid.data() + mid.size());
  SaveOptions so;
  so.storage = &watch;
  so.direct_io = false;
  std::unique_ptr<Comm> comm = MakeSingleComm();
  Result<SaveStats> saved = Save(s, "/ckpt", *comm, so);
  ASSERT_TRUE(saved.ok()) << saved.status().ToString();
  EXPECT_EQ(watch.bytes_written_from_watched(), 32768u * 4);

  std::vector<float> b(16), m(32768), z(16);
  State back;
  back.tensors = {WholeTensor("a", DType::kF32, b.data(), {16}),
                  WholeTensor("mid", DType::kF32, m.data(), {32768}),
                  WholeTensor("z", DType::kF32, z.data(), {16})};
  LoadOptions lo;
  lo.storage = mem.get();
  Result<LoadResult> loaded = Load(back, "/ckpt", *comm, lo);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(b, before);
  EXPECT_EQ(m, mid);
  EXPECT_EQ(z, after);
}

TEST(InPlaceWrite, DirectFileGoesThroughTheStagingBuffers) {
  char tmpl[] = "./shardpoint_in_place_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  uint64_t in_source = 1;
  bool direct = false;
  SaveAndCheck(DefaultStorage(), std::string(tmpl) + "/ckpt", /*direct=*/true, &in_source, &direct);
  if (direct) {
    EXPECT_EQ(in_source, 0u);  // O_DIRECT: aligned staging only
  }
  EXPECT_TRUE(DefaultStorage()->RemoveAll(tmpl).ok());
}

}  // namespace
}  // namespace shardpoint
