#include "src/geometry/convert.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace shardpoint::internal_geometry {
namespace {

// One element from -> to, by value.
template <typename To, typename From>
To Conv(DType from, From v, DType to) {
  To out{};
  ConvertElements(from, &v, to, &out, 1);
  return out;
}
uint16_t ToF16(double v) { return Conv<uint16_t>(DType::kF64, v, DType::kF16); }
uint16_t ToBF16(double v) { return Conv<uint16_t>(DType::kF64, v, DType::kBF16); }
uint16_t F32ToBF16(float v) { return Conv<uint16_t>(DType::kF32, v, DType::kBF16); }
uint8_t ToE4M3(double v) { return Conv<uint8_t>(DType::kF64, v, DType::kF8E4M3); }
uint8_t ToE5M2(double v) { return Conv<uint8_t>(DType::kF64, v, DType::kF8E5M2); }
float Bits32(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}
template <typename T>
double ToF64(DType from, T bits) {
  return Conv<double>(from, bits, DType::kF64);
}

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

TEST(ConvertTest, BF16) {
  EXPECT_EQ(ToBF16(1.0), 0x3f80);
  EXPECT_EQ(ToBF16(-2.0), 0xc000);
  EXPECT_EQ(ToF64(DType::kBF16, uint16_t{0x3f80}), 1.0);
  for (auto conv : {+[](float f) { return F32ToBF16(f); }, +[](float f) { return ToBF16(f); }}) {
    EXPECT_EQ(conv(Bits32(0x3f808000)), 0x3f80);  // tie, round to even (down)
    EXPECT_EQ(conv(Bits32(0x3f818000)), 0x3f82);  // tie, round to even (up)
    EXPECT_EQ(conv(Bits32(0x3f808001)), 0x3f81);  // above the tie
    EXPECT_EQ(conv(Bits32(0x00018000)), 0x0002);  // subnormal tie
    EXPECT_EQ(conv(Bits32(0x00007fff)), 0x0000);  // tiny subnormal rounds to zero
    EXPECT_EQ(conv(Bits32(0x7f7fffff)), 0x7f80);  // FLT_MAX rounds to inf
    EXPECT_EQ(conv(Bits32(0x7f7f7fff)), 0x7f7f);  // stays the largest finite
    EXPECT_EQ(conv(-0.0f), 0x8000);
    EXPECT_EQ(conv(std::numeric_limits<float>::infinity()), 0x7f80);
    EXPECT_EQ(conv(std::numeric_limits<float>::quiet_NaN()) & 0x7fc0, 0x7fc0);
  }
}

TEST(ConvertTest, F16) {
  EXPECT_EQ(ToF16(1.0), 0x3c00);
  EXPECT_EQ(ToF16(65504.0), 0x7bff);
  EXPECT_EQ(ToF16(65519.0), 0x7bff);
  EXPECT_EQ(ToF16(65520.0), 0x7c00);  // tie at the top rounds up to inf
  EXPECT_EQ(ToF16(-1e10), 0xfc00);
  EXPECT_EQ(ToF16(kInf), 0x7c00);
  EXPECT_EQ(ToF16(std::ldexp(1.0, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(ToF16(std::ldexp(1.0, -25)), 0x0000);  // tie to even: zero
  EXPECT_EQ(ToF16(std::ldexp(1.0001, -25)), 0x0001);
  EXPECT_EQ(ToF16(std::ldexp(3.0, -25)), 0x0002);             // tie 1|2 -> 2
  EXPECT_EQ(ToF16(std::ldexp(1023.5, -24)), 0x0400);          // subnormal rounds up to normal
  EXPECT_EQ(ToF16(std::ldexp(1.0 + 1.0 / 2048, 0)), 0x3c00);  // tie to even
  EXPECT_EQ(ToF16(std::ldexp(1.0 + 3.0 / 2048, 0)), 0x3c02);  // tie to even (up)
  EXPECT_EQ(ToF16(-0.0), 0x8000);
  EXPECT_EQ(ToF16(kNaN) & 0x7e00, 0x7e00);
  EXPECT_EQ(ToF64(DType::kF16, uint16_t{0x0001}), std::ldexp(1.0, -24));
  EXPECT_EQ(ToF64(DType::kF16, uint16_t{0xfbff}), -65504.0);
  EXPECT_EQ(ToF64(DType::kF16, uint16_t{0x7c00}), kInf);
  EXPECT_TRUE(std::isnan(ToF64(DType::kF16, uint16_t{0x7c01})));
}

TEST(ConvertTest, F8E4M3) {
  EXPECT_EQ(ToE4M3(1.0), 0x38);
  EXPECT_EQ(ToE4M3(448.0), 0x7e);
  EXPECT_EQ(ToE4M3(-448.0), 0xfe);
  EXPECT_EQ(ToE4M3(464.0), 0x7e);  // saturates (no inf)
  EXPECT_EQ(ToE4M3(1e6), 0x7e);
  EXPECT_EQ(ToE4M3(kInf), 0x7e);
  EXPECT_EQ(ToE4M3(-kInf), 0xfe);
  EXPECT_EQ(ToE4M3(kNaN), 0x7f);
  EXPECT_EQ(ToE4M3(240.0), 0x77);
  EXPECT_EQ(ToE4M3(std::ldexp(1.0, -9)), 0x01);   // smallest subnormal
  EXPECT_EQ(ToE4M3(std::ldexp(1.0, -10)), 0x00);  // tie to even: zero
  EXPECT_EQ(ToE4M3(std::ldexp(3.0, -10)), 0x02);  // tie 1|2 -> 2
  EXPECT_EQ(ToE4M3(std::ldexp(7.0, -9)), 0x07);   // largest subnormal
  EXPECT_EQ(ToE4M3(std::ldexp(1.0, -6)), 0x08);   // smallest normal
  EXPECT_EQ(ToE4M3(1.0625), 0x38);                // tie to even (down)
  EXPECT_EQ(ToE4M3(1.1875), 0x3a);                // tie to even (up)
  EXPECT_EQ(ToF64(DType::kF8E4M3, uint8_t{0x7e}), 448.0);
  EXPECT_EQ(ToF64(DType::kF8E4M3, uint8_t{0x78}), 256.0);  // exp 15 is finite
  EXPECT_TRUE(std::isnan(ToF64(DType::kF8E4M3, uint8_t{0x7f})));
  EXPECT_TRUE(std::isnan(ToF64(DType::kF8E4M3, uint8_t{0xff})));
  EXPECT_TRUE(std::signbit(ToF64(DType::kF8E4M3, uint8_t{0x80})));
}

TEST(ConvertTest, F8E5M2) {
  EXPECT_EQ(ToE5M2(1.0), 0x3c);
  EXPECT_EQ(ToE5M2(57344.0), 0x7b);
  EXPECT_EQ(ToE5M2(61440.0), 0x7c);  // tie at the top rounds up to inf
  EXPECT_EQ(ToE5M2(-kInf), 0xfc);
  EXPECT_EQ(ToE5M2(kNaN) & 0x7f, 0x7e);
  EXPECT_EQ(ToE5M2(std::ldexp(1.0, -16)), 0x01);
  EXPECT_EQ(ToE5M2(1.125), 0x3c);  // tie to even (down)
  EXPECT_EQ(ToE5M2(1.375), 0x3e);  // tie to even (up)
  EXPECT_EQ(ToF64(DType::kF8E5M2, uint8_t{0x7c}), kInf);
  EXPECT_TRUE(std::isnan(ToF64(DType::kF8E5M2, uint8_t{0x7d})));
}

// Every narrow float -> f32 (and f64) -> back is bit-exact; NaNs stay NaN.
TEST(ConvertTest, RoundTripsAllBitPatterns) {
  struct Case {
    DType type;
    int bits;
  };
  for (Case c : {Case{DType::kF16, 16}, Case{DType::kBF16, 16}, Case{DType::kF8E4M3, 8},
                 Case{DType::kF8E5M2, 8}}) {
    const size_t n = size_t{1} << c.bits, size = c.bits / 8;
    std::vector<uint8_t> in(n * size), back(n * size);
    for (size_t i = 0; i < n; ++i) std::memcpy(&in[i * size], &i, size);  // little-endian
    for (DType wide : {DType::kF32, DType::kF64}) {
      std::vector<uint8_t> mid(n * 8);
      ConvertElements(c.type, in.data(), wide, mid.data(), static_cast<int64_t>(n));
      ConvertElements(wide, mid.data(), c.type, back.data(), static_cast<int64_t>(n));
      for (size_t i = 0; i < n; ++i) {
        const double v = wide == DType::kF32 ? double{reinterpret_cast<float*>(mid.data())[i]}
                                             : reinterpret_cast<double*>(mid.data())[i];
        if (std::isnan(v)) {
          EXPECT_TRUE(
              std::isnan(ToF64(c.type, back[i * size] | (size == 2 ? back[i * size + 1] << 8 : 0))))
              << DTypeName(c.type) << " " << i;
          continue;
        }
        ASSERT_EQ(std::memcmp(&in[i * size], &back[i * size], size), 0)
            << DTypeName(c.type) << " via " << DTypeName(wide) << " pattern " << i;
      }
    }
  }
}

// The f32 -> bf16 fast path and the f32 -> f16 path agree with independent
// references on random f32 bit patterns (incl. subnormals, inf, NaN).
TEST(ConvertTest, RandomF32AgainstReferences) {
  std::mt19937_64 rng(7);
  const int n = 200000;
  std::vector<float> src(n);
  for (float& f : src) {
    uint32_t b = static_cast<uint32_t>(rng());
    if (rng() % 4 == 0) b &= 0x807fffff;  // subnormals
    std::memcpy(&f, &b, 4);
  }
  std::vector<uint16_t> fast(n), generic(n), half(n);
  std::vector<double> wide(n);
  ConvertElements(DType::kF32, src.data(), DType::kBF16, fast.data(), n);
  ConvertElements(DType::kF32, src.data(), DType::kF64, wide.data(), n);
  ConvertElements(DType::kF64, wide.data(), DType::kBF16, generic.data(), n);
  ConvertElements(DType::kF32, src.data(), DType::kF16, half.data(), n);
  for (int i = 0; i < n; ++i) {
    if (std::isnan(src[i])) continue;
    ASSERT_EQ(fast[i], generic[i]) << src[i];
#ifdef __FLT16_MAX__
    _Float16 h = static_cast<_Float16>(src[i]);
    uint16_t ref;
    std::memcpy(&ref, &h, 2);
    ASSERT_EQ(half[i], ref) << src[i];
#endif
  }
}

TEST(ConvertTest, IntegersSaturate) {
  EXPECT_EQ(Conv<int8_t>(DType::kI32, int32_t{300}, DType::kI8), 127);
  EXPECT_EQ(Conv<int8_t>(DType::kI32, int32_t{-300}, DType::kI8), -128);
  EXPECT_EQ(Conv<int8_t>(DType::kU8, uint8_t{200}, DType::kI8), 127);
  EXPECT_EQ(Conv<uint8_t>(DType::kI8, int8_t{-1}, DType::kU8), 0);
  EXPECT_EQ(Conv<uint64_t>(DType::kI64, int64_t{-5}, DType::kU64), 0u);
  EXPECT_EQ(Conv<int64_t>(DType::kU64, std::numeric_limits<uint64_t>::max(), DType::kI64),
            std::numeric_limits<int64_t>::max());
  EXPECT_EQ(Conv<uint64_t>(DType::kI64, std::numeric_limits<int64_t>::min(), DType::kU64), 0u);
  EXPECT_EQ(Conv<int16_t>(DType::kU64, uint64_t{1234}, DType::kI16), 1234);
  EXPECT_EQ(Conv<uint16_t>(DType::kI64, int64_t{70000}, DType::kU16), 65535);
  EXPECT_EQ(Conv<uint8_t>(DType::kI32, int32_t{5}, DType::kBool), 1);
  EXPECT_EQ(Conv<uint8_t>(DType::kI32, int32_t{0}, DType::kBool), 0);
  EXPECT_EQ(Conv<int32_t>(DType::kBool, uint8_t{2}, DType::kI32), 1);  // any non-zero byte
}

TEST(ConvertTest, FloatToInt) {
  EXPECT_EQ(Conv<int32_t>(DType::kF64, 3.7, DType::kI32), 3);
  EXPECT_EQ(Conv<int32_t>(DType::kF64, -3.7, DType::kI32), -3);
  EXPECT_EQ(Conv<int32_t>(DType::kF64, kNaN, DType::kI32), 0);
  EXPECT_EQ(Conv<int64_t>(DType::kF64, 1e20, DType::kI64), std::numeric_limits<int64_t>::max());
  EXPECT_EQ(Conv<int64_t>(DType::kF64, -1e20, DType::kI64), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(Conv<int64_t>(DType::kF64, -kInf, DType::kI64), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(Conv<uint64_t>(DType::kF64, 1e20, DType::kU64), std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(Conv<uint32_t>(DType::kF32, -1.0f, DType::kU32), 0u);
  EXPECT_EQ(Conv<uint8_t>(DType::kF32, 300.5f, DType::kU8), 255);
  EXPECT_EQ(Conv<int16_t>(DType::kF8E4M3, uint8_t{0xfe}, DType::kI16), -448);
  EXPECT_EQ(Conv<int32_t>(DType::kBF16, uint16_t{0xc2f7}, DType::kI32), -123);  // -123.5
  EXPECT_EQ(Conv<uint8_t>(DType::kF16, uint16_t{0x3800}, DType::kBool), 1);     // 0.5
  EXPECT_EQ(Conv<uint8_t>(DType::kF16, uint16_t{0x8000}, DType::kBool), 0);     // -0
}

TEST(ConvertTest, IntToFloat) {
  EXPECT_EQ(Conv<float>(DType::kBool, uint8_t{1}, DType::kF32), 1.0f);
  EXPECT_EQ(Conv<uint16_t>(DType::kI8, int8_t{-1}, DType::kBF16), 0xbf80);
  EXPECT_EQ(Conv<uint8_t>(DType::kU8, uint8_t{1}, DType::kF8E4M3), 0x38);
  EXPECT_EQ(Conv<double>(DType::kI32, int32_t{-123456789}, DType::kF64), -123456789.0);
  // 2^60 + 2^52 + 1 is just above a bf16 tie; naive i64 -> f64 -> bf16 would
  // round to the tie and then down.
  const int64_t v = (int64_t{1} << 60) + (int64_t{1} << 52) + 1;
  EXPECT_EQ(Conv<uint16_t>(DType::kI64, v, DType::kBF16), 0x5d81);
  EXPECT_EQ(Conv<uint16_t>(DType::kI64, (int64_t{1} << 60) + (int64_t{1} << 52), DType::kBF16),
            0x5d80);
  EXPECT_EQ(Conv<float>(DType::kI64, (int64_t{1} << 60) + (int64_t{1} << 36) + 1, DType::kF32),
            std::ldexp(1.0f + std::ldexp(1.0f, -23), 60));
  EXPECT_EQ(Conv<float>(DType::kU64, std::numeric_limits<uint64_t>::max(), DType::kF32),
            std::ldexp(1.0f, 64));
  EXPECT_EQ(Conv<uint16_t>(DType::kU64, std::numeric_limits<uint64_t>::max(), DType::kF16), 0x7c00);
  EXPECT_EQ(Conv<uint8_t>(DType::kI32, int32_t{-100000}, DType::kF8E4M3), 0xfe);
  EXPECT_EQ(Conv<uint16_t>(DType::kI32, int32_t{2049}, DType::kF16), 0x6800);  // 2048, tie to even
}

// Every pair runs (under sanitizers) and narrow -> f64 -> any equals narrow -> any.
TEST(ConvertTest, AllPairsConsistentViaF64) {
  std::mt19937_64 rng(3);
  const int n = 512;
  std::vector<uint8_t> src(n * 8);
  for (uint8_t& b : src) b = static_cast<uint8_t>(rng());
  for (int f = 0; f < kNumDTypes; ++f) {
    for (int t = 0; t < kNumDTypes; ++t) {
      const DType from = static_cast<DType>(f), to = static_cast<DType>(t);
      std::vector<uint8_t> direct(n * 8), wide(n * 8), via(n * 8);
      ConvertElements(from, src.data(), to, direct.data(), n);
      if (from == to) {
        EXPECT_EQ(std::memcmp(direct.data(), src.data(), n * DTypeSize(from)), 0);
      }
      // f64 holds every value of these sources exactly.
      const bool exact =
          from != to && from != DType::kI64 && from != DType::kU64 && from != DType::kF64;
      if (!exact) continue;
      ConvertElements(from, src.data(), DType::kF64, wide.data(), n);
      ConvertElements(DType::kF64, wide.data(), to, via.data(), n);
      for (int i = 0; i < n; ++i) {
        if (std::isnan(reinterpret_cast<double*>(wide.data())[i])) continue;
        const size_t s = DTypeSize(to);
        ASSERT_EQ(std::memcmp(&direct[i * s], &via[i * s], s), 0)
            << DTypeName(from) << " -> " << DTypeName(to) << " element " << i;
      }
    }
  }
}

}  // namespace
}  // namespace shardpoint::internal_geometry
