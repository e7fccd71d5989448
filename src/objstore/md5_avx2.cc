// The 8-lane MD5 compression (md5_lanes.h), built with -mavx2 on x86-64 and
// called only where the CPU has AVX2. Each 256-bit register holds one MD5
// word for 8 messages; the message blocks are transposed into that layout.
#include "src/objstore/md5_lanes.h"

#if defined(__AVX2__)
#include <immintrin.h>

namespace shardpoint::internal_objstore {
namespace {

template <int S>
inline __m256i Rotl(__m256i x) {
  return _mm256_or_si256(_mm256_slli_epi32(x, S), _mm256_srli_epi32(x, 32 - S));
}
inline __m256i Add(__m256i a, __m256i b) { return _mm256_add_epi32(a, b); }
inline __m256i F(__m256i b, __m256i c, __m256i d) {
  return _mm256_xor_si256(d, _mm256_and_si256(b, _mm256_xor_si256(c, d)));
}
inline __m256i G(__m256i b, __m256i c, __m256i d) {
  return _mm256_xor_si256(c, _mm256_and_si256(d, _mm256_xor_si256(b, c)));
}
inline __m256i H(__m256i b, __m256i c, __m256i d) {
  return _mm256_xor_si256(_mm256_xor_si256(b, c), d);
}
inline __m256i I(__m256i b, __m256i c, __m256i d) {
  return _mm256_xor_si256(c, _mm256_or_si256(b, _mm256_xor_si256(d, _mm256_set1_epi32(-1))));
}

// w[i] = word i of the 8 lanes' blocks (rows: lanes, columns: words).
inline void Transpose(const unsigned char* const p[kMd5Lanes], int half, __m256i* w) {
  __m256i r[8];
  for (int j = 0; j < 8; ++j) {
    r[j] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p[j] + 32 * half));
  }
  __m256i t[8], u[8];
  for (int j = 0; j < 8; j += 2) {
    t[j] = _mm256_unpacklo_epi32(r[j], r[j + 1]);
    t[j + 1] = _mm256_unpackhi_epi32(r[j], r[j + 1]);
  }
  for (int j = 0; j < 8; j += 4) {
    u[j] = _mm256_unpacklo_epi64(t[j], t[j + 2]);
    u[j + 1] = _mm256_unpackhi_epi64(t[j], t[j + 2]);
    u[j + 2] = _mm256_unpacklo_epi64(t[j + 1], t[j + 3]);
    u[j + 3] = _mm256_unpackhi_epi64(t[j + 1], t[j + 3]);
  }
  for (int k = 0; k < 4; ++k) {
    w[k] = _mm256_permute2x128_si256(u[k], u[k + 4], 0x20);
    w[k + 4] = _mm256_permute2x128_si256(u[k], u[k + 4], 0x31);
  }
}

#define SP_MD5_STEP8(f, a, b, c, d, g, s, i)                                                \
  a = Add(a, Add(f(b, c, d), Add(w[g], _mm256_set1_epi32(static_cast<int>(kMd5Sine[i]))))); \
  a = Add(b, Rotl<s>(a))

#define SP_MD5_ROUND8(f, i, g0, g1, g2, g3, s0, s1, s2, s3) \
  SP_MD5_STEP8(f, a, b, c, d, g0, s0, i);                   \
  SP_MD5_STEP8(f, d, a, b, c, g1, s1, i + 1);               \
  SP_MD5_STEP8(f, c, d, a, b, g2, s2, i + 2);               \
  SP_MD5_STEP8(f, b, c, d, a, g3, s3, i + 3)

void Compress8(uint32_t state[4][kMd5Lanes], const unsigned char* const p_in[kMd5Lanes],
               const uint64_t step[kMd5Lanes], uint64_t blocks) {
  const unsigned char* p[kMd5Lanes];
  for (int j = 0; j < kMd5Lanes; ++j) p[j] = p_in[j];
  __m256i a = _mm256_load_si256(reinterpret_cast<const __m256i*>(state[0]));
  __m256i b = _mm256_load_si256(reinterpret_cast<const __m256i*>(state[1]));
  __m256i c = _mm256_load_si256(reinterpret_cast<const __m256i*>(state[2]));
  __m256i d = _mm256_load_si256(reinterpret_cast<const __m256i*>(state[3]));
  for (uint64_t k = 0; k < blocks; ++k) {
    __m256i w[16];
    Transpose(p, 0, w);
    Transpose(p, 1, w + 8);
    for (int j = 0; j < kMd5Lanes; ++j) p[j] += step[j];
    const __m256i a0 = a, b0 = b, c0 = c, d0 = d;
    SP_MD5_ROUND8(F, 0, 0, 1, 2, 3, 7, 12, 17, 22);
    SP_MD5_ROUND8(F, 4, 4, 5, 6, 7, 7, 12, 17, 22);
    SP_MD5_ROUND8(F, 8, 8, 9, 10, 11, 7, 12, 17, 22);
    SP_MD5_ROUND8(F, 12, 12, 13, 14, 15, 7, 12, 17, 22);
    SP_MD5_ROUND8(G, 16, 1, 6, 11, 0, 5, 9, 14, 20);
    SP_MD5_ROUND8(G, 20, 5, 10, 15, 4, 5, 9, 14, 20);
    SP_MD5_ROUND8(G, 24, 9, 14, 3, 8, 5, 9, 14, 20);
    SP_MD5_ROUND8(G, 28, 13, 2, 7, 12, 5, 9, 14, 20);
    SP_MD5_ROUND8(H, 32, 5, 8, 11, 14, 4, 11, 16, 23);
    SP_MD5_ROUND8(H, 36, 1, 4, 7, 10, 4, 11, 16, 23);
    SP_MD5_ROUND8(H, 40, 13, 0, 3, 6, 4, 11, 16, 23);
    SP_MD5_ROUND8(H, 44, 9, 12, 15, 2, 4, 11, 16, 23);
    SP_MD5_ROUND8(I, 48, 0, 7, 14, 5, 6, 10, 15, 21);
    SP_MD5_ROUND8(I, 52, 12, 3, 10, 1, 6, 10, 15, 21);
    SP_MD5_ROUND8(I, 56, 8, 15, 6, 13, 6, 10, 15, 21);
    SP_MD5_ROUND8(I, 60, 4, 11, 2, 9, 6, 10, 15, 21);
    a = Add(a, a0);
    b = Add(b, b0);
    c = Add(c, c0);
    d = Add(d, d0);
  }
  _mm256_store_si256(reinterpret_cast<__m256i*>(state[0]), a);
  _mm256_store_si256(reinterpret_cast<__m256i*>(state[1]), b);
  _mm256_store_si256(reinterpret_cast<__m256i*>(state[2]), c);
  _mm256_store_si256(reinterpret_cast<__m256i*>(state[3]), d);
}

#undef SP_MD5_ROUND8
#undef SP_MD5_STEP8

}  // namespace

Md5Compress8Fn Avx2Md5Compress8() { return __builtin_cpu_supports("avx2") ? &Compress8 : nullptr; }

}  // namespace shardpoint::internal_objstore

#else  // a build without AVX2: the scalar compression only

namespace shardpoint::internal_objstore {
Md5Compress8Fn Avx2Md5Compress8() { return nullptr; }
}  // namespace shardpoint::internal_objstore

#endif
