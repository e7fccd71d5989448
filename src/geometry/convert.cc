// Element-wise dtype conversion.
//
// Every pair of dtypes goes through one of two exact intermediates: integers
// (bool and u8..u64) through __int128, floats through double, which holds
// every f8/f16/bf16/f32 value exactly. Rounding to a narrow float therefore
// happens once, from the double, with round-to-nearest-even done in integer
// arithmetic (EncodeNarrow). The one place where a value is not exact in
// double is an integer above 2^53; it is first rounded to odd, which makes the
// second rounding to a <= 24-bit significand correct. f32 and f64 targets use
// the hardware conversions, which are correctly rounded.
//
// The per-element work is chosen at compile time: one loop per (from, to)
// pair, picked from a table, so nothing is dispatched per element.
#include "src/geometry/convert.h"

#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

namespace shardpoint::internal_geometry {
namespace {

using Int = __int128;

// A narrow binary float format: sign, `exp_bits` exponent bits, `man_bits`
// mantissa bits. IEEE-like formats have inf and NaN at the all-ones exponent;
// E4M3FN has no inf, NaN is only S.1111.111, and finite values reach S.1111.110.
struct Narrow {
  int exp_bits;
  int man_bits;
  bool ieee;          // has inf (all-ones exponent reserved)
  uint32_t nan_bits;  // the quiet NaN produced (positive)
  int bias() const { return (1 << (exp_bits - 1)) - 1; }
  int sign_shift() const { return exp_bits + man_bits; }
  uint32_t max_finite() const {
    const uint32_t all = (1u << sign_shift()) - 1;
    return ieee ? (((1u << exp_bits) - 2) << man_bits) | ((1u << man_bits) - 1) : all - 1;
  }
  uint32_t inf_bits() const { return ((1u << exp_bits) - 1) << man_bits; }
};

constexpr Narrow kF16{5, 10, true, 0x7e00};
constexpr Narrow kBF16{8, 7, true, 0x7fc0};
constexpr Narrow kE4M3{4, 3, false, 0x7f};
constexpr Narrow kE5M2{5, 2, true, 0x7e};

double DecodeNarrow(const Narrow& f, uint32_t bits) {
  const bool neg = (bits >> f.sign_shift()) & 1;
  const uint32_t exp = (bits >> f.man_bits) & ((1u << f.exp_bits) - 1);
  const uint32_t man = bits & ((1u << f.man_bits) - 1);
  double v;
  if (f.ieee && exp == (1u << f.exp_bits) - 1) {
    v = man == 0 ? std::numeric_limits<double>::infinity()
                 : std::numeric_limits<double>::quiet_NaN();
  } else if (!f.ieee && (bits & ~(1u << f.sign_shift())) == f.nan_bits) {
    v = std::numeric_limits<double>::quiet_NaN();
  } else if (exp == 0) {
    v = std::ldexp(static_cast<double>(man), 1 - f.bias() - f.man_bits);
  } else {
    v = std::ldexp(static_cast<double>(man | (1u << f.man_bits)),
                   static_cast<int>(exp) - f.bias() - f.man_bits);
  }
  return neg ? -v : v;
}

// Rounds x to the format, nearest even. Overflow gives inf (IEEE-like) or the
// largest finite value (E4M3FN, which has no inf; inf saturates there too).
uint32_t EncodeNarrow(const Narrow& f, double x) {
  const uint32_t sign = std::signbit(x) ? 1u << f.sign_shift() : 0;
  if (std::isnan(x)) return sign | f.nan_bits;
  const double a = std::fabs(x);
  if (std::isinf(a)) return sign | (f.ieee ? f.inf_bits() : f.max_finite());
  if (a == 0) return sign;
  int e;
  std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1): the leading bit is 2^(e-1)
  const int min_exp = 1 - f.bias();
  const int lead = std::max(e - 1, min_exp);  // below min_exp the value is subnormal
  const int quantum = lead - f.man_bits;      // exponent of one unit in the last place
  // Scaling by a power of two is exact; s < 2^(man_bits + 1) fits easily.
  const double s = std::ldexp(a, -quantum);
  double r = std::floor(s);
  const double frac = s - r;
  if (frac > 0.5 || (frac == 0.5 && std::fmod(r, 2.0) != 0)) r += 1;
  // With the implicit bit included in r, adding it to the exponent field one
  // below lead encodes normals; a mantissa carry (r == 2^(man+1)) or a
  // subnormal rounding up to 2^man lands in the next exponent by itself.
  const uint64_t bits =
      (static_cast<uint64_t>(lead + f.bias() - 1) << f.man_bits) + static_cast<uint64_t>(r);
  if (bits > f.max_finite()) return sign | (f.ieee ? f.inf_bits() : f.max_finite());
  return sign | static_cast<uint32_t>(bits);
}

// An integer of at most 65 significant bits as a double, rounded to odd when
// it has more than 53, so that a later rounding to fewer bits is correct.
double IntToDoubleRoundOdd(Int v) {
  const bool neg = v < 0;
  unsigned __int128 mag = neg ? -static_cast<unsigned __int128>(v) : v;
  int shift = 0;
  while ((mag >> shift) >= (static_cast<unsigned __int128>(1) << 53)) ++shift;
  uint64_t kept = static_cast<uint64_t>(mag >> shift);
  if (shift > 0 && (mag & ((static_cast<unsigned __int128>(1) << shift) - 1)) != 0) kept |= 1;
  const double d = std::ldexp(static_cast<double>(kept), shift);
  return neg ? -d : d;
}

// Decode tables for the 8- and 16-bit float formats, built once (thread-safe
// static initialization).
template <size_t N>
std::array<float, N> BuildTable(const Narrow& f) {
  std::array<float, N> t;
  for (size_t i = 0; i < N; ++i) t[i] = static_cast<float>(DecodeNarrow(f, i));
  return t;
}
const float* F16Table() {
  static const auto* t = new std::array<float, 65536>(BuildTable<65536>(kF16));
  return t->data();
}
const float* E4M3Table() {
  static const auto* t = new std::array<float, 256>(BuildTable<256>(kE4M3));
  return t->data();
}
const float* E5M2Table() {
  static const auto* t = new std::array<float, 256>(BuildTable<256>(kE5M2));
  return t->data();
}

template <typename T>
T Load(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}
template <typename T>
void Store(char* p, T v) {
  std::memcpy(p, &v, sizeof(T));
}

constexpr bool IsFloat(DType t) {
  return t == DType::kF16 || t == DType::kBF16 || t == DType::kF32 || t == DType::kF64 ||
         t == DType::kF8E4M3 || t == DType::kF8E5M2;
}

// The C++ storage type of an integer dtype.
template <DType T>
struct IntType;
// clang-format off
template <> struct IntType<DType::kBool> { using type = uint8_t; };
template <> struct IntType<DType::kU8> { using type = uint8_t; };
template <> struct IntType<DType::kI8> { using type = int8_t; };
template <> struct IntType<DType::kI16> { using type = int16_t; };
template <> struct IntType<DType::kU16> { using type = uint16_t; };
template <> struct IntType<DType::kI32> { using type = int32_t; };
template <> struct IntType<DType::kU32> { using type = uint32_t; };
template <> struct IntType<DType::kI64> { using type = int64_t; };
template <> struct IntType<DType::kU64> { using type = uint64_t; };
// clang-format on

// Reads one float element as a double. `table` is the decode table for the
// 8/16-bit formats that use one.
template <DType F>
double LoadFloat(const char* p, const float* table) {
  if constexpr (F == DType::kF32) return Load<float>(p);
  if constexpr (F == DType::kF64) return Load<double>(p);
  if constexpr (F == DType::kF16) return table[Load<uint16_t>(p)];
  if constexpr (F == DType::kF8E4M3 || F == DType::kF8E5M2) return table[Load<uint8_t>(p)];
  if constexpr (F == DType::kBF16) {
    const uint32_t bits = static_cast<uint32_t>(Load<uint16_t>(p)) << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  }
}

template <DType F>
const float* TableFor() {
  if constexpr (F == DType::kF16) return F16Table();
  if constexpr (F == DType::kF8E4M3) return E4M3Table();
  if constexpr (F == DType::kF8E5M2) return E5M2Table();
  return nullptr;
}

template <DType T>
void StoreFloat(char* p, double v) {
  if constexpr (T == DType::kF32) Store<float>(p, static_cast<float>(v));
  if constexpr (T == DType::kF64) Store<double>(p, v);
  if constexpr (T == DType::kF16) Store<uint16_t>(p, EncodeNarrow(kF16, v));
  if constexpr (T == DType::kBF16) Store<uint16_t>(p, EncodeNarrow(kBF16, v));
  if constexpr (T == DType::kF8E4M3) Store<uint8_t>(p, EncodeNarrow(kE4M3, v));
  if constexpr (T == DType::kF8E5M2) Store<uint8_t>(p, EncodeNarrow(kE5M2, v));
}

template <DType F>
Int LoadInt(const char* p) {
  using S = typename IntType<F>::type;
  const S v = Load<S>(p);
  if constexpr (F == DType::kBool) return v != 0;
  return static_cast<Int>(v);
}

// Saturating store of an integer.
template <DType T>
void StoreInt(char* p, Int v) {
  using D = typename IntType<T>::type;
  if constexpr (T == DType::kBool) {
    Store<D>(p, v != 0);
  } else {
    constexpr Int lo = std::numeric_limits<D>::min();
    constexpr Int hi = std::numeric_limits<D>::max();
    Store<D>(p, static_cast<D>(v < lo ? lo : (v > hi ? hi : v)));
  }
}

// Float -> integer: truncate toward zero, saturate; NaN becomes 0.
Int FloatToInt(double v) {
  if (std::isnan(v)) return 0;
  constexpr double kCap = 0x1p100;  // beyond every integer dtype, within __int128
  if (v >= kCap) return static_cast<Int>(kCap);
  if (v <= -kCap) return -static_cast<Int>(kCap);
  return static_cast<Int>(std::trunc(v));
}

// bf16 from f32 bits, nearest even, without going through double.
uint16_t F32ToBF16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffff) > 0x7f800000) return static_cast<uint16_t>((bits >> 16) | 0x40);
  bits += 0x7fff + ((bits >> 16) & 1);
  return static_cast<uint16_t>(bits >> 16);
}

template <DType F, DType T>
void ConvertLoop(const char* src, char* dst, int64_t n) {
  const size_t in = DTypeSize(F), out = DTypeSize(T);
  if constexpr (F == DType::kF32 && T == DType::kBF16) {
    for (int64_t i = 0; i < n; ++i)
      Store<uint16_t>(dst + i * 2, F32ToBF16(Load<float>(src + i * 4)));
  } else if constexpr (IsFloat(F) && IsFloat(T)) {
    const float* table = TableFor<F>();
    for (int64_t i = 0; i < n; ++i) StoreFloat<T>(dst + i * out, LoadFloat<F>(src + i * in, table));
  } else if constexpr (IsFloat(F)) {
    const float* table = TableFor<F>();
    for (int64_t i = 0; i < n; ++i) {
      const double v = LoadFloat<F>(src + i * in, table);
      if constexpr (T == DType::kBool) {
        Store<uint8_t>(dst + i, v != 0);
      } else {
        StoreInt<T>(dst + i * out, FloatToInt(v));
      }
    }
  } else if constexpr (IsFloat(T)) {
    for (int64_t i = 0; i < n; ++i) {
      const Int v = LoadInt<F>(src + i * in);
      char* p = dst + i * out;
      if constexpr (T == DType::kF64) {
        Store<double>(p, static_cast<double>(v));  // correctly rounded
      } else if constexpr (T == DType::kF32) {
        Store<float>(p, static_cast<float>(v));  // correctly rounded
      } else {
        StoreFloat<T>(p, IntToDoubleRoundOdd(v));
      }
    }
  } else {
    for (int64_t i = 0; i < n; ++i) StoreInt<T>(dst + i * out, LoadInt<F>(src + i * in));
  }
}

using LoopFn = void (*)(const char*, char*, int64_t);

template <size_t... I>
constexpr std::array<LoopFn, kNumDTypes * kNumDTypes> MakeLoops(std::index_sequence<I...>) {
  return {&ConvertLoop<static_cast<DType>(I / kNumDTypes), static_cast<DType>(I % kNumDTypes)>...};
}
constexpr auto kLoops = MakeLoops(std::make_index_sequence<kNumDTypes * kNumDTypes>());

}  // namespace

void ConvertElements(DType from, const void* src, DType to, void* dst, int64_t n) {
  if (n <= 0) return;
  if (from == to) {
    std::memcpy(dst, src, static_cast<size_t>(n) * DTypeSize(from));
    return;
  }
  kLoops[static_cast<size_t>(from) * kNumDTypes + static_cast<size_t>(to)](
      static_cast<const char*>(src), static_cast<char*>(dst), n);
}

}  // namespace shardpoint::internal_geometry
