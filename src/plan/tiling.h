// Exact-tiling check: the distinct boxes of a tensor must cover it with no
// gap and no overlap. Sort/sweep, not all pairs.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "shardpoint/box.h"
#include "shardpoint/status.h"

namespace shardpoint::internal_plan {

// Names who holds box i in error messages ("ranks 0, 2", "chunk 3 in data/1.safetensors").
using DescribeHolder = std::function<std::string(size_t)>;

// REQUIRES: boxes validated inside `shape`, distinct, non-empty.
// InvalidArgument naming the key, both boxes and their holders on an overlap,
// or the covered count and an uncovered element on a gap.
Status CheckTiling(const std::string& key, const Shape& shape, const std::vector<Box>& boxes,
                   const DescribeHolder& describe);

std::string RanksToString(const std::vector<int>& ranks);

}  // namespace shardpoint::internal_plan
