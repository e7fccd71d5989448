#include "src/objstore/md5_lanes.h"

#include <algorithm>
#include <cstring>

namespace shardpoint::internal_objstore {

const uint32_t kMd5Sine[64] = {
    0xd76aa478, 0xe8c7b756, 0x242070db, 0xc1bdceee, 0xf57c0faf, 0x4787c62a, 0xa8304613, 0xfd469501,
    0x698098d8, 0x8b44f7af, 0xffff5bb1, 0x895cd7be, 0x6b901122, 0xfd987193, 0xa679438e, 0x49b40821,
    0xf61e2562, 0xc040b340, 0x265e5a51, 0xe9b6c7aa, 0xd62f105d, 0x02441453, 0xd8a1e681, 0xe7d3fbc8,
    0x21e1cde6, 0xc33707d6, 0xf4d50d87, 0x455a14ed, 0xa9e3e905, 0xfcefa3f8, 0x676f02d9, 0x8d2a4c8a,
    0xfffa3942, 0x8771f681, 0x6d9d6122, 0xfde5380c, 0xa4beea44, 0x4bdecfa9, 0xf6bb4b60, 0xbebfbc70,
    0x289b7ec6, 0xeaa127fa, 0xd4ef3085, 0x04881d05, 0xd9d4d039, 0xe6db99e5, 0x1fa27cf8, 0xc4ac5665,
    0xf4292244, 0x432aff97, 0xab9423a7, 0xfc93a039, 0x655b59c3, 0x8f0ccc92, 0xffeff47d, 0x85845dd1,
    0x6fa87e4f, 0xfe2ce6e0, 0xa3014314, 0x4e0811a1, 0xf7537e82, 0xbd3af235, 0x2ad7d2bb, 0xeb86d391};

namespace {

constexpr uint32_t kInit[4] = {0x67452301, 0xefcdab89, 0x98badcfe, 0x10325476};

inline uint32_t Rotl(uint32_t x, int s) { return (x << s) | (x >> (32 - s)); }

inline uint32_t Word(const unsigned char* p) {
  return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
}

// The last bytes (fewer than 64) and the padding: one or two blocks.
void Finish(uint32_t h[4], const unsigned char* tail, uint64_t total, unsigned char digest[16]) {
  unsigned char last[128] = {};
  const size_t rest = total % 64;
  std::memcpy(last, tail, rest);
  last[rest] = 0x80;
  const size_t blocks = rest < 56 ? 1 : 2;
  const uint64_t bits = total * 8;
  for (int i = 0; i < 8; ++i)
    last[blocks * 64 - 8 + i] = static_cast<unsigned char>(bits >> (8 * i));
  Md5CompressScalar(h, last, blocks);
  for (int i = 0; i < 4; ++i) {
    for (int b = 0; b < 4; ++b) digest[4 * i + b] = static_cast<unsigned char>(h[i] >> (8 * b));
  }
}

}  // namespace

#define SP_MD5_STEP(f, a, b, c, d, g, s, i) \
  a += f(b, c, d) + w[g] + kMd5Sine[i];     \
  a = b + Rotl(a, s)

void Md5CompressScalar(uint32_t h[4], const unsigned char* p, uint64_t blocks) {
  auto F = [](uint32_t b, uint32_t c, uint32_t d) { return d ^ (b & (c ^ d)); };
  auto G = [](uint32_t b, uint32_t c, uint32_t d) { return c ^ (d & (b ^ c)); };
  auto H = [](uint32_t b, uint32_t c, uint32_t d) { return b ^ c ^ d; };
  auto I = [](uint32_t b, uint32_t c, uint32_t d) { return c ^ (b | ~d); };
  for (uint64_t k = 0; k < blocks; ++k, p += 64) {
    uint32_t w[16];
    for (int i = 0; i < 16; ++i) w[i] = Word(p + 4 * i);
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3];
    for (int i = 0; i < 16; i += 4) {
      SP_MD5_STEP(F, a, b, c, d, i, 7, i);
      SP_MD5_STEP(F, d, a, b, c, i + 1, 12, i + 1);
      SP_MD5_STEP(F, c, d, a, b, i + 2, 17, i + 2);
      SP_MD5_STEP(F, b, c, d, a, i + 3, 22, i + 3);
    }
    for (int i = 16; i < 32; i += 4) {
      SP_MD5_STEP(G, a, b, c, d, (5 * i + 1) % 16, 5, i);
      SP_MD5_STEP(G, d, a, b, c, (5 * i + 6) % 16, 9, i + 1);
      SP_MD5_STEP(G, c, d, a, b, (5 * i + 11) % 16, 14, i + 2);
      SP_MD5_STEP(G, b, c, d, a, (5 * i + 16) % 16, 20, i + 3);
    }
    for (int i = 32; i < 48; i += 4) {
      SP_MD5_STEP(H, a, b, c, d, (3 * i + 5) % 16, 4, i);
      SP_MD5_STEP(H, d, a, b, c, (3 * i + 8) % 16, 11, i + 1);
      SP_MD5_STEP(H, c, d, a, b, (3 * i + 11) % 16, 16, i + 2);
      SP_MD5_STEP(H, b, c, d, a, (3 * i + 14) % 16, 23, i + 3);
    }
    for (int i = 48; i < 64; i += 4) {
      SP_MD5_STEP(I, a, b, c, d, (7 * i) % 16, 6, i);
      SP_MD5_STEP(I, d, a, b, c, (7 * i + 7) % 16, 10, i + 1);
      SP_MD5_STEP(I, c, d, a, b, (7 * i + 14) % 16, 15, i + 2);
      SP_MD5_STEP(I, b, c, d, a, (7 * i + 21) % 16, 21, i + 3);
    }
    h[0] += a;
    h[1] += b;
    h[2] += c;
    h[3] += d;
  }
}

#undef SP_MD5_STEP

Md5Lanes::Md5Lanes(bool use_avx2) : avx2_(use_avx2 ? Avx2Md5Compress8() : nullptr) {}

void Md5Lanes::Add(Md5Job* job) {
  int j = 0;
  while (job_[j] != nullptr) ++j;
  job_[j] = job;
  for (int i = 0; i < 4; ++i) state_[i][j] = kInit[i];
  next_[j] = job->data;
  blocks_left_[j] = job->size / 64;
  ++active_;
}

void Md5Lanes::FinishDone(std::vector<Md5Job*>* finished) {
  for (int j = 0; j < kMd5Lanes; ++j) {
    if (job_[j] == nullptr || blocks_left_[j] > 0) continue;
    uint32_t h[4] = {state_[0][j], state_[1][j], state_[2][j], state_[3][j]};
    Finish(h, next_[j], job_[j]->size, job_[j]->digest);
    finished->push_back(job_[j]);
    job_[j] = nullptr;
    --active_;
  }
}

void Md5Lanes::Run(uint64_t max_blocks, std::vector<Md5Job*>* finished) {
  FinishDone(finished);
  if (active_ == 0) return;
  uint64_t blocks = max_blocks;
  for (int j = 0; j < kMd5Lanes; ++j) {
    if (job_[j] != nullptr) blocks = std::min(blocks, blocks_left_[j]);
  }
  if (active_ > 1 && avx2_ != nullptr) {
    static const unsigned char kIdle[64] = {};
    const unsigned char* p[kMd5Lanes];
    uint64_t step[kMd5Lanes];
    for (int j = 0; j < kMd5Lanes; ++j) {
      p[j] = job_[j] != nullptr ? next_[j] : kIdle;
      step[j] = job_[j] != nullptr ? 64 : 0;
    }
    avx2_(state_, p, step, blocks);
  } else {
    for (int j = 0; j < kMd5Lanes; ++j) {
      if (job_[j] == nullptr) continue;
      uint32_t h[4] = {state_[0][j], state_[1][j], state_[2][j], state_[3][j]};
      Md5CompressScalar(h, next_[j], blocks);
      for (int i = 0; i < 4; ++i) state_[i][j] = h[i];
    }
  }
  for (int j = 0; j < kMd5Lanes; ++j) {
    if (job_[j] == nullptr) continue;
    next_[j] += blocks * 64;
    blocks_left_[j] -= blocks;
  }
  FinishDone(finished);
}

void Md5Digest(const void* data, uint64_t size, unsigned char digest[16]) {
  Md5Job job{static_cast<const unsigned char*>(data), size, {}};
  Md5Lanes lanes(false);
  lanes.Add(&job);
  std::vector<Md5Job*> finished;
  while (finished.empty()) lanes.Run(UINT64_MAX, &finished);
  std::memcpy(digest, job.digest, 16);
}

}  // namespace shardpoint::internal_objstore
