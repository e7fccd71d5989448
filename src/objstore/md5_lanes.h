// MD5 of several messages at once, in the 8 lanes of AVX2 registers: one
// message's MD5 is a serial chain (about 580 MB/s on one core here, the
// largest share of an S3 save's client CPU: every part carries Content-MD5),
// but 8 independent messages hashed side by side cost little more than one.
// Md5Lanes holds up to 8 messages (parts of any uploads) and advances them in
// lockstep; a lone message runs the scalar compression instead. Every digest
// equals OpenSSL's MD5 (tested on random lengths); only the speed differs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace shardpoint::internal_objstore {

inline constexpr int kMd5Lanes = 8;
// RFC 1321's table T[1..64] (floor(2^32 * |sin(i)|)), shared by the kernels.
extern const uint32_t kMd5Sine[64];

// One message to hash; `digest` is set when Md5Lanes::Run reports it done.
struct Md5Job {
  const unsigned char* data = nullptr;
  uint64_t size = 0;
  unsigned char digest[16] = {};
};

// Compresses `blocks` 64-byte blocks into state h[0..3] (scalar).
void Md5CompressScalar(uint32_t h[4], const unsigned char* p, uint64_t blocks);

// Compresses `blocks` blocks of each lane j (from p[j], advancing by step[j],
// 0 or 64) into state[0..3][j]; nullptr where this CPU or build has no AVX2.
using Md5Compress8Fn = void (*)(uint32_t state[4][kMd5Lanes],
                                const unsigned char* const p[kMd5Lanes],
                                const uint64_t step[kMd5Lanes], uint64_t blocks);
Md5Compress8Fn Avx2Md5Compress8();

class Md5Lanes {
 public:
  explicit Md5Lanes(bool use_avx2 = true);
  bool full() const { return active_ == kMd5Lanes; }
  bool empty() const { return active_ == 0; }
  // Puts a job in a free lane (full() must be false).
  void Add(Md5Job* job);
  // Advances every lane by at most max_blocks blocks (all by the same count:
  // up to the shortest), finishes the jobs left with no full block and
  // appends them to *finished, freeing their lanes.
  void Run(uint64_t max_blocks, std::vector<Md5Job*>* finished);

 private:
  void FinishDone(std::vector<Md5Job*>* finished);

  Md5Compress8Fn avx2_;
  alignas(32) uint32_t state_[4][kMd5Lanes] = {};
  Md5Job* job_[kMd5Lanes] = {};
  const unsigned char* next_[kMd5Lanes] = {};
  uint64_t blocks_left_[kMd5Lanes] = {};
  int active_ = 0;
};

// The 16-byte MD5 of data through Md5Lanes, alone (tests, tools).
void Md5Digest(const void* data, uint64_t size, unsigned char digest[16]);

}  // namespace shardpoint::internal_objstore
