#include "src/format/checksum.h"

#include <gtest/gtest.h>
#include <xxhash.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "src/format/checksum_kernels.h"

namespace shardpoint::internal_format {
namespace {

TEST(Checksum, KnownValues) {
  // XXH3-64 with seed 0 (reference values from xxhsum -H3).
  EXPECT_EQ(Checksum64("", 0), 0x2D06800538D394C2ULL);
  EXPECT_EQ(Checksum64(nullptr, 0), 0x2D06800538D394C2ULL);
}

TEST(Checksum, DiffersOnChange) {
  std::string a = "hello world";
  std::string b = "hello worle";
  EXPECT_NE(Checksum64(a.data(), a.size()), Checksum64(b.data(), b.size()));
}

TEST(Checksum, StreamingMatchesOneShot) {
  std::mt19937_64 rng(7);
  std::string data(100000, '\0');
  for (char& c : data) c = static_cast<char>(rng());
  for (size_t n : {0u, 1u, 15u, 16u, 17u, 240u, 241u, 1000u, 65536u, 100000u}) {
    uint64_t want = Checksum64(data.data(), n);
    ChecksumState s;
    size_t pos = 0;
    while (pos < n) {
      size_t step = std::min<size_t>(n - pos, 1 + rng() % 5000);
      s.Update(data.data() + pos, step);
      pos += step;
    }
    EXPECT_EQ(s.Digest(), want) << "n=" << n;
    EXPECT_EQ(s.Digest(), want) << "Digest is repeatable";
  }
}

TEST(Checksum, ResetAndMove) {
  std::string d = "abcdef";
  ChecksumState s;
  s.Update("junk", 4);
  s.Reset();
  s.Update(d.data(), 3);
  ChecksumState t = std::move(s);
  t.Update(d.data() + 3, 3);
  EXPECT_EQ(t.Digest(), Checksum64(d.data(), d.size()));
  ChecksumState u;
  u = std::move(t);
  EXPECT_EQ(u.Digest(), Checksum64(d.data(), d.size()));
  // A moved-from state is usable again after Reset.
  t.Reset();  // NOLINT(bugprone-use-after-move)
  t.Update(d.data(), d.size());
  EXPECT_EQ(t.Digest(), Checksum64(d.data(), d.size()));
}

// Streams `n` bytes of `data` through kernels `k` in pieces of random size.
uint64_t Streamed(const ChecksumKernels& k, const char* data, size_t n, std::mt19937_64& rng) {
  void* st = k.new_state();
  for (size_t pos = 0; pos < n;) {
    const size_t step = std::min<size_t>(n - pos, 1 + rng() % (rng() % 2 ? 64 : 9000));
    k.update(st, data + pos, step);
    pos += step;
  }
  const uint64_t h = k.digest(st);
  k.free_state(st);
  return h;
}

TEST(Checksum, Avx2BuildAgreesWithLibxxhash) {
  const ChecksumKernels* avx2 = Avx2ChecksumKernels();
  if (__builtin_cpu_supports("avx2")) {
    // Where the CPU has AVX2 the build must have it, and use it.
    ASSERT_NE(avx2, nullptr);
    EXPECT_STREQ(ActiveChecksumKernels().name, "avx2");
  }
  if (!avx2) GTEST_SKIP() << "no AVX2 on this CPU or in this build";
  const ChecksumKernels& lib = BaselineChecksumKernels();
  std::mt19937_64 rng(11);
  std::string data(3 << 20, '\0');
  for (char& c : data) c = static_cast<char>(rng());
  // Every length regime of XXH3 (0, 1-3, 4-8, 9-16, 17-128, 129-240, long:
  // stripes of 64 bytes, blocks of 1024, the last partial stripe), then sizes
  // around the 1 MiB verification block, at odd offsets.
  std::vector<size_t> sizes;
  for (size_t n = 0; n <= 2100; ++n) sizes.push_back(n);
  for (size_t n : {size_t{65535}, size_t{65536}, size_t{1} << 20, (size_t{1} << 20) + 1,
                   (size_t{3} << 20) - 7}) {
    sizes.push_back(n);
  }
  for (size_t n : sizes) {
    const char* at = data.data() + (n % 7);
    if (n + 7 > data.size()) at = data.data();
    const uint64_t want = XXH3_64bits(at, n);
    ASSERT_EQ(lib.oneshot(at, n), want) << "n=" << n;
    ASSERT_EQ(avx2->oneshot(at, n), want) << "n=" << n;
    ASSERT_EQ(Streamed(*avx2, at, n, rng), want) << "n=" << n;
    if (n % 97 == 0) {
      ASSERT_EQ(Streamed(lib, at, n, rng), want) << "n=" << n;
    }
  }
  // A changed byte changes the AVX2 digest as it does the library's.
  data[12345] ^= 1;
  EXPECT_EQ(avx2->oneshot(data.data(), data.size()), XXH3_64bits(data.data(), data.size()));
}

}  // namespace
}  // namespace shardpoint::internal_format
