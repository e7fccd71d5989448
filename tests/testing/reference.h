// Reference global tensors, for tests, benchmarks and the demo: fill every
// rank's local tensors from the truth, and check them against it bit for bit.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "shardpoint/tensor.h"

namespace shardpoint::testing {

struct RefTensor {
  DType dtype = DType::kF32;
  Shape shape;
  std::vector<char> bytes;  // row-major
};
using RefModel = std::map<std::string, RefTensor>;

// A tensor of `shape` with bytes from a seeded generator.
RefTensor RandomRefTensor(DType dtype, const Shape& shape, uint64_t seed);

// Copies the truth into every region of `tensors` (any layout).
Status FillFromReference(const RefModel& ref, const std::vector<LocalTensor>& tensors);
// DataLoss naming the key, box and first differing element unless every
// region of `tensors` equals the truth bit for bit.
Status CheckAgainstReference(const RefModel& ref, const std::vector<LocalTensor>& tensors);

}  // namespace shardpoint::testing
