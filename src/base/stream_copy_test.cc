#include "src/base/stream_copy.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

namespace shardpoint::internal_base {
namespace {

// Every size around the streaming threshold and the 64-byte steps, at every
// alignment of source and destination within 16 bytes: the bytes of a
// memcpy, and nothing written outside [dst, dst + n).
TEST(StreamCopyTest, CopiesExactlyTheBytesOfAMemcpyAtAnySizeAndAlignment) {
  std::mt19937 rng(7);
  const size_t big = kStreamCopyMinBytes + 200;
  std::vector<char> src(big + 32);
  for (char& c : src) c = static_cast<char>(rng());
  std::vector<char> dst(big + 64), want(big + 64);
  for (size_t n : {size_t{0}, size_t{1}, size_t{63}, size_t{4096}, kStreamCopyMinBytes - 1,
                   kStreamCopyMinBytes, kStreamCopyMinBytes + 1, kStreamCopyMinBytes + 63,
                   kStreamCopyMinBytes + 64, kStreamCopyMinBytes + 127, big}) {
    for (size_t sa : {0, 1, 8, 15}) {
      for (size_t da : {0, 3, 16, 31}) {
        std::memset(dst.data(), 0x5a, dst.size());
        std::memset(want.data(), 0x5a, want.size());
        std::memcpy(want.data() + da, src.data() + sa, n);
        StreamCopy(dst.data() + da, src.data() + sa, n);
        ASSERT_EQ(dst, want) << "n " << n << ", source +" << sa << ", destination +" << da;
      }
    }
  }
}

}  // namespace
}  // namespace shardpoint::internal_base
