#include "src/base/stream_copy.h"

#include <cstdint>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace shardpoint::internal_base {

void StreamCopy(void* dst, const void* src, size_t n) {
#if defined(__SSE2__)
  if (n >= kStreamCopyMinBytes) {
    char* d = static_cast<char*>(dst);
    const char* s = static_cast<const char*>(src);
    // A head up to the destination's 16-byte alignment, the body in 64-byte
    // steps of aligned streaming stores, the tail.
    const size_t head = (16 - reinterpret_cast<uintptr_t>(d) % 16) % 16;
    std::memcpy(d, s, head);
    d += head;
    s += head;
    n -= head;
    const size_t body = n / 64 * 64;
    for (size_t i = 0; i < body; i += 64) {
      const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 16));
      const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 32));
      const __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 48));
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + i), a);
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 16), b);
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 32), c);
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 48), e);
    }
    _mm_sfence();  // the streamed stores ordered before whatever follows
    std::memcpy(d + body, s + body, n - body);
    return;
  }
#endif
  if (n > 0) std::memcpy(dst, src, n);
}

}  // namespace shardpoint::internal_base
