#include "shardpoint/dtype.h"

#include <array>

namespace shardpoint {
namespace {

struct DTypeInfo {
  DType dtype;
  size_t size;
  std::string_view name;   // safetensors
  std::string_view alias;  // short lower-case
};

constexpr std::array<DTypeInfo, kNumDTypes> kInfo = {{
    {DType::kBool, 1, "BOOL", "bool"},
    {DType::kU8, 1, "U8", "u8"},
    {DType::kI8, 1, "I8", "i8"},
    {DType::kI16, 2, "I16", "i16"},
    {DType::kU16, 2, "U16", "u16"},
    {DType::kI32, 4, "I32", "i32"},
    {DType::kU32, 4, "U32", "u32"},
    {DType::kI64, 8, "I64", "i64"},
    {DType::kU64, 8, "U64", "u64"},
    {DType::kF16, 2, "F16", "f16"},
    {DType::kBF16, 2, "BF16", "bf16"},
    {DType::kF32, 4, "F32", "f32"},
    {DType::kF64, 8, "F64", "f64"},
    {DType::kF8E4M3, 1, "F8_E4M3", "f8_e4m3"},
    {DType::kF8E5M2, 1, "F8_E5M2", "f8_e5m2"},
}};

}  // namespace

bool IsValidDType(uint8_t v) { return v < kNumDTypes; }

size_t DTypeSize(DType dtype) { return kInfo[static_cast<size_t>(dtype)].size; }

std::string_view DTypeName(DType dtype) { return kInfo[static_cast<size_t>(dtype)].name; }

Result<DType> ParseDType(std::string_view name) {
  for (const DTypeInfo& info : kInfo) {
    if (name == info.name || name == info.alias) return info.dtype;
  }
  return InvalidArgumentError("unknown dtype '" + std::string(name) + "'");
}

}  // namespace shardpoint
