// XXH3-64 compiled for AVX2 (CMakeLists.txt builds this file alone with
// -mavx2 on x86-64). Called only where the CPU has AVX2 (checksum.cc asks).
// It includes no C++ library header: an inline function of one, compiled here
// with AVX2 instructions, could be the copy the linker keeps for every caller.
#include "src/format/checksum_kernels.h"

#if defined(__AVX2__)
#define XXH_INLINE_ALL  // every XXH function static to this file; -mavx2 selects its AVX2 code
#include <xxhash.h>
#endif

namespace shardpoint::internal_format {

#if defined(__AVX2__)
namespace {

uint64_t OneShot(const void* data, size_t n) { return XXH3_64bits(data, n); }
void* NewState() {
  XXH3_state_t* s = XXH3_createState();
  if (s) XXH3_64bits_reset(s);
  return s;
}
void FreeState(void* s) { XXH3_freeState(static_cast<XXH3_state_t*>(s)); }
void Reset(void* s) { XXH3_64bits_reset(static_cast<XXH3_state_t*>(s)); }
void Update(void* s, const void* data, size_t n) {
  XXH3_64bits_update(static_cast<XXH3_state_t*>(s), data, n);
}
uint64_t Digest(const void* s) { return XXH3_64bits_digest(static_cast<const XXH3_state_t*>(s)); }

const ChecksumKernels kAvx2{"avx2", OneShot, NewState, FreeState, Reset, Update, Digest};

}  // namespace

const ChecksumKernels* Avx2ChecksumKernels() {
  return __builtin_cpu_supports("avx2") ? &kAvx2 : nullptr;
}
#else
const ChecksumKernels* Avx2ChecksumKernels() { return nullptr; }
#endif

}  // namespace shardpoint::internal_format
