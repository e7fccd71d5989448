// Little-endian byte writer and bounds-checked reader for binary formats.
//
// Writer appends to a string; Reader walks untrusted bytes and returns false
// instead of reading past the end (the caller adds context to the error).
// Both are plain values over borrowed memory; not thread-safe.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <type_traits>

#include "shardpoint/box.h"

namespace shardpoint::internal {

template <typename T>
T FromLE(T v) {
  if constexpr (std::endian::native == std::endian::big) {
    return __builtin_bswap64(v) >> (64 - 8 * sizeof(T));  // only for unsigned T
  }
  return v;
}

// Appends into a buffer sized in advance.
class Writer {
 public:
  explicit Writer(std::string* out) : out_(out) {}
  void Bytes(const void* p, size_t n) { out_->append(static_cast<const char*>(p), n); }
  template <typename T>
  void Int(T v) {
    using U = std::make_unsigned_t<T>;
    U u = FromLE(static_cast<U>(v));
    Bytes(&u, sizeof(u));
  }
  void Str(std::string_view s) {
    Int<uint32_t>(static_cast<uint32_t>(s.size()));
    Bytes(s.data(), s.size());
  }
  void Blob(std::string_view s) {
    Int<uint64_t>(s.size());
    Bytes(s.data(), s.size());
  }
  void Dims(const Shape& s) {
    for (int64_t v : s) Int<int64_t>(v);
  }

 private:
  std::string* out_;
};

// Bounds-checked cursor over untrusted bytes. Every read returns false rather
// than run past the end; the caller turns that into an error with context.
class Reader {
 public:
  explicit Reader(std::string_view b) : p_(b.data()), end_(b.data() + b.size()), begin_(p_) {}
  size_t left() const { return static_cast<size_t>(end_ - p_); }
  size_t pos() const { return static_cast<size_t>(p_ - begin_); }
  template <typename T>
  bool Int(T* v) {
    using U = std::make_unsigned_t<T>;
    if (left() < sizeof(U)) return false;
    U u;
    std::memcpy(&u, p_, sizeof(U));
    p_ += sizeof(U);
    *v = static_cast<T>(FromLE(u));
    return true;
  }
  bool Str(std::string* s) {
    uint32_t n;
    return Int(&n) && Take(n, s);
  }
  bool Blob(std::string* s) {
    uint64_t n;
    return Int(&n) && Take(n, s);
  }
  // `rank` values; the caller has bounded rank.
  bool Dims(size_t rank, Shape* s) {
    if (left() / 8 < rank) return false;
    s->resize(rank);
    for (size_t i = 0; i < rank; ++i) Int(&(*s)[i]);
    return true;
  }
  // A count of items of at least `min_size` bytes each that must fit in what is left.
  bool Count(size_t min_size, uint64_t* n) { return Int(n) && *n <= left() / min_size; }

 private:
  bool Take(uint64_t n, std::string* s) {
    if (n > left()) return false;
    s->assign(p_, n);
    p_ += n;
    return true;
  }
  const char* p_;
  const char* end_;
  const char* begin_;
};

// 16 lower-case hex digits.
inline std::string Hex16(uint64_t v) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s(16, '0');
  for (int i = 15; i >= 0; --i, v >>= 4) s[i] = kHex[v & 15];
  return s;
}

}  // namespace shardpoint::internal
