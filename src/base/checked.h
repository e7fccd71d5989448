// Checked integer arithmetic for sizes, offsets and element counts computed
// from untrusted input (manifests, safetensors headers, caller layouts).
// Every such sum and product in shardpoint goes through these: the result,
// or nullopt when it does not fit T.
#pragma once

#include <optional>
#include <type_traits>

namespace shardpoint::internal_base {

template <typename T>
[[nodiscard]] std::optional<T> CheckedAdd(T a, T b) {
  static_assert(std::is_integral_v<T>);
  T r;
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}

template <typename T>
[[nodiscard]] std::optional<T> CheckedMul(T a, T b) {
  static_assert(std::is_integral_v<T>);
  T r;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

}  // namespace shardpoint::internal_base
