#include "src/format/checksum.h"

#include <gtest/gtest.h>

#include <random>
#include <string>

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

}  // namespace
}  // namespace shardpoint::internal_format
