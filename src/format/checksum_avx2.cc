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
#define SP_CHECKSUM_KERNELS_NAME "avx2"
#include "src/format/checksum_kernels.inc"

const ChecksumKernels* Avx2ChecksumKernels() {
  __builtin_cpu_init();  // also safe before libgcc's constructors have run
  return __builtin_cpu_supports("avx2") ? &kKernels : nullptr;
}
#else
const ChecksumKernels* Avx2ChecksumKernels() { return nullptr; }
#endif

}  // namespace shardpoint::internal_format
