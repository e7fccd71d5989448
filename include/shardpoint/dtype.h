// Element types of stored tensors.
//
// Names follow safetensors ("F32", "BF16", "F8_E4M3", ...). All functions are
// pure and thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "shardpoint/status.h"

namespace shardpoint {

enum class DType : uint8_t {
  kBool = 0,
  kU8,
  kI8,
  kI16,
  kU16,
  kI32,
  kU32,
  kI64,
  kU64,
  kF16,
  kBF16,
  kF32,
  kF64,
  kF8E4M3,
  kF8E5M2,
};
inline constexpr int kNumDTypes = 15;

// Size of one element in bytes (1, 2, 4 or 8).
size_t DTypeSize(DType dtype);
// The safetensors name, e.g. "BF16".
std::string_view DTypeName(DType dtype);
// Parses a safetensors name (case-sensitive, e.g. "F8_E4M3") or a short
// lower-case alias ("f32", "bf16", "f8_e4m3", "bool", "u8", ...).
Result<DType> ParseDType(std::string_view name);
// True if `v` is a valid DType value (for decoding untrusted bytes).
bool IsValidDType(uint8_t v);

}  // namespace shardpoint
