#include "shardpoint/dtype.h"

#include <gtest/gtest.h>

#include <string>

namespace shardpoint {
namespace {

TEST(DTypeTest, SizesAndNames) {
  EXPECT_EQ(DTypeSize(DType::kBool), 1u);
  EXPECT_EQ(DTypeSize(DType::kBF16), 2u);
  EXPECT_EQ(DTypeSize(DType::kU32), 4u);
  EXPECT_EQ(DTypeSize(DType::kF64), 8u);
  EXPECT_EQ(DTypeSize(DType::kF8E5M2), 1u);
  EXPECT_EQ(DTypeName(DType::kF8E4M3), "F8_E4M3");
  EXPECT_EQ(DTypeName(DType::kBF16), "BF16");
}

TEST(DTypeTest, ParseRoundTrip) {
  for (int i = 0; i < kNumDTypes; ++i) {
    const DType t = static_cast<DType>(i);
    Result<DType> p = ParseDType(DTypeName(t));
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(*p, t);
  }
  EXPECT_EQ(*ParseDType("f8_e4m3"), DType::kF8E4M3);
  EXPECT_EQ(*ParseDType("bf16"), DType::kBF16);
  EXPECT_EQ(*ParseDType("bool"), DType::kBool);
  Result<DType> bad = ParseDType("float32");
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("float32"), std::string::npos);
  EXPECT_FALSE(ParseDType("Bf16").ok());  // case-sensitive
}

TEST(DTypeTest, IsValid) {
  EXPECT_TRUE(IsValidDType(0));
  EXPECT_TRUE(IsValidDType(kNumDTypes - 1));
  EXPECT_FALSE(IsValidDType(kNumDTypes));
  EXPECT_FALSE(IsValidDType(255));
}

}  // namespace
}  // namespace shardpoint
