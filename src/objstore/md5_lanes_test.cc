// Every MD5 path (scalar, 8 AVX2 lanes in lockstep, the shared combiner under
// concurrent callers) against OpenSSL's MD5 and RFC 1321's vectors.
#include "src/objstore/md5_lanes.h"

#include <gtest/gtest.h>
#include <openssl/evp.h>

#include <random>
#include <string>
#include <thread>
#include <vector>

#include "src/objstore/crypto.h"
#include "src/objstore/md5_shared.h"

namespace shardpoint::internal_objstore {
namespace {

std::string OpenSslMd5(const std::string& data) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EXPECT_EQ(EVP_Digest(data.data(), data.size(), out, &n, EVP_md5(), nullptr), 1);
  return HexEncode(std::string_view(reinterpret_cast<const char*>(out), n));
}

std::string Hex(const unsigned char digest[16]) {
  return HexEncode(std::string_view(reinterpret_cast<const char*>(digest), 16));
}

std::string Random(std::mt19937_64& rng, size_t n) {
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

TEST(Md5Lanes, Rfc1321Vectors) {
  const std::pair<std::string, std::string> kVectors[] = {
      {"", "d41d8cd98f00b204e9800998ecf8427e"},
      {"a", "0cc175b9c0f1b6a831c399e269772661"},
      {"abc", "900150983cd24fb0d6963f7d28e17f72"},
      {"message digest", "f96b697d7cb7938d525a2f31aaf161d0"},
      {"abcdefghijklmnopqrstuvwxyz", "c3fcd3d76192e4007dfb496cca67e13b"},
      {"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789",
       "d174ab98d277d9f5a5611c2c9f419d9f"},
      {"1234567890123456789012345678901234567890123456789012345678901234567890"
       "1234567890",
       "57edf4a22be3c955ac49da2e2107b67a"}};
  for (const auto& [in, want] : kVectors) {
    unsigned char d[16];
    Md5Digest(in.data(), in.size(), d);
    EXPECT_EQ(Hex(d), want) << in;
    EXPECT_EQ(Md5Hex(in), want) << in;
  }
}

TEST(Md5Lanes, ScalarMatchesOpenSslAroundEveryPaddingBoundary) {
  std::mt19937_64 rng(38);
  for (size_t n = 0; n < 300; ++n) {
    const std::string s = Random(rng, n);
    unsigned char d[16];
    Md5Digest(s.data(), s.size(), d);
    ASSERT_EQ(Hex(d), OpenSslMd5(s)) << n << " bytes";
  }
}

// Jobs of mixed lengths through the lanes, refilled as they finish, with the
// AVX2 kernel (where this CPU has it) and without.
void CheckLanes(bool avx2, uint64_t turn_blocks) {
  std::mt19937_64 rng(39 + turn_blocks);
  std::vector<std::string> inputs;
  for (int i = 0; i < 40; ++i) {
    const size_t n = i % 5 == 0 ? rng() % 200 : rng() % (1 << 16) + (i % 7 == 0 ? (1 << 20) : 0);
    inputs.push_back(Random(rng, n));
  }
  std::vector<Md5Job> jobs(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    jobs[i].data = reinterpret_cast<const unsigned char*>(inputs[i].data());
    jobs[i].size = inputs[i].size();
  }
  Md5Lanes lanes(avx2);
  std::vector<Md5Job*> finished;
  size_t next = 0;
  while (next < jobs.size() || !lanes.empty()) {
    while (!lanes.full() && next < jobs.size()) lanes.Add(&jobs[next++]);
    lanes.Run(turn_blocks, &finished);
  }
  ASSERT_EQ(finished.size(), jobs.size());
  for (size_t i = 0; i < jobs.size(); ++i) {
    EXPECT_EQ(Hex(jobs[i].digest), OpenSslMd5(inputs[i]))
        << "job " << i << ", " << inputs[i].size() << " bytes";
  }
}

TEST(Md5Lanes, EightLanesInLockstepMatchOpenSsl) {
  if (Avx2Md5Compress8() == nullptr) GTEST_SKIP() << "no AVX2 on this CPU";
  CheckLanes(true, 1);
  CheckLanes(true, 37);
  CheckLanes(true, 1 << 20);
}

TEST(Md5Lanes, ScalarLanesMatchOpenSsl) { CheckLanes(false, 64); }

TEST(Md5Lanes, SharedByConcurrentCallersMatchesOpenSsl) {
  constexpr int kThreads = 12;
  std::vector<std::string> inputs;
  std::mt19937_64 rng(40);
  for (int i = 0; i < kThreads * 3; ++i) {
    inputs.push_back(Random(rng, rng() % (3 << 20) + (i % 4 == 0 ? 0 : 64)));
  }
  std::vector<std::string> got(inputs.size());
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (size_t i = t; i < inputs.size(); i += kThreads) {
        unsigned char d[16];
        SharedMd5(inputs[i].data(), inputs[i].size(), d);
        got[i] = Hex(d);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (size_t i = 0; i < inputs.size(); ++i) EXPECT_EQ(got[i], OpenSslMd5(inputs[i])) << i;
}

}  // namespace
}  // namespace shardpoint::internal_objstore
