// An HF model's tensors in shardpoint keys (HfKeyInfo: what DescribeHf and a
// mapping give) and HfShard, which cuts a rank's Megatron-style shard of one.
// LoadFromHf and DescribeHf are in hf_load.h, which includes this header.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "shardpoint/dtype.h"
#include "shardpoint/status.h"
#include "shardpoint/tensor.h"

namespace shardpoint {

// What an HF model provides, in shardpoint keys.
struct HfKeyInfo {
  std::string key;
  DType dtype = DType::kF32;
  Shape shape;
  std::string split;              // the rule's hint ("replicated" if unmatched)
  int64_t heads = 0, groups = 0;  // gqa rules
  std::vector<std::string> hf;    // the HF tensors it is made of
};

// Tensor, expert parallel coordinates for HfShard.
struct HfParallel {
  int tp_rank = 0, tp_size = 1;
  int ep_rank = 0, ep_size = 1;
};
// The Megatron-style local tensor of `info` at `data` following its hint:
// column/vocab/gqa = ColumnParallel, row = RowParallel, replicated =
// WholeTensor, swiglu = SwiGluFc1 over one [2F, ...] key, experts_swiglu =
// FusedGateUpExperts, experts_row / experts_column = StackedExperts split on
// the expert's dim 1 / 0. `dtype` is the local dtype.
Result<LocalTensor> HfShard(const HfKeyInfo& info, DType dtype, void* data, const HfParallel& p);

}  // namespace shardpoint
