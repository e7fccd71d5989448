// Regions: everything a rank's tensors contribute, reduced to
// (key, global box, strided view into local memory).
#pragma once

#include <string>
#include <vector>

#include "shardpoint/state.h"
#include "src/geometry/view.h"

namespace shardpoint::internal_plan {

// What a region is, without its memory: this is what ranks exchange.
struct RegionDesc {
  std::string key;
  DType dtype = DType::kF32;
  Shape global_shape;
  Box box;  // empty box = a declaration only (the tensor has zero elements)
};

struct Region {
  RegionDesc desc;
  internal_geometry::View view;  // shape == desc.box.shape; byte strides into the local tensor
  size_t local = 0;              // index of the local tensor it lies in
};

// Validates every tensor (ValidateLocalTensor) and reduces it to regions: one
// per (segment, local box) with a non-empty intersection. A flat-range tensor
// is split into at most 2*ndim-1 local boxes first. A tensor with zero
// elements yields one declaration region (empty box) so that its key, dtype
// and shape are still known. Errors name the tensor index and key.
Result<std::vector<Region>> BuildRegions(const std::vector<LocalTensor>& tensors);

}  // namespace shardpoint::internal_plan
