// The dtypes torch 2.x saves as `_rebuild_tensor_v3` of an untyped storage
// (torch.storage._new_dtypes: float8 since 2.1, uint16/32/64 since 2.3), by
// torch's name and shardpoint's dtype: the DCP tests' expected values.
#pragma once

#include "shardpoint/dtype.h"

namespace shardpoint::testing {

struct TorchNewerDType {
  const char* name;
  DType dtype;
};
inline constexpr TorchNewerDType kTorchNewerDTypes[] = {{"uint16", DType::kU16},
                                                        {"uint32", DType::kU32},
                                                        {"uint64", DType::kU64},
                                                        {"float8_e4m3fn", DType::kF8E4M3},
                                                        {"float8_e5m2", DType::kF8E5M2}};

}  // namespace shardpoint::testing
