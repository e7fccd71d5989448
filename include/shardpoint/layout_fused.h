// Fused weights: one local tensor that holds TP shards of several components.
//
// A fused local weight is the concatenation, along one dim, of the TP shard
// of every component: SwiGLU fc1 = [W_i; V_i], GQA QKV interleaved per query
// group, fused gate/up experts, GDN in_proj [q_i; k_i; v_i; z_i; b_i; a_i].
// The checkpoint holds each component at the same place whatever the TP size
// (a separate key, or a fixed row range of a shared key), so fused weights
// reshard into any TP size, into flat buffers (FlatBufferShard) and FSDP2
// shards (ShardLocal). Each component is split with torch.chunk sizes.
//
// Pure functions, thread-safe; `data` is the caller's memory, untouched.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "shardpoint/tensor.h"

namespace shardpoint {

// One component of a fused weight: rows [offset, offset + size) of dim `dim`
// of the global tensor `key` (size < 0: to the end of the global dim).
struct FusedPart {
  std::string key;
  Shape global_shape;
  int64_t offset = 0;
  int64_t size = -1;
};

// TP shard `tp_rank` of `tp_size` of every part, concatenated along `dim` in
// part order. Every dim other than `dim` is held whole. InvalidArgument on
// parts that disagree in rank or other dims, or fall outside their tensor.
Result<LocalTensor> FusedShard(DType dtype, void* data, const std::vector<FusedPart>& parts,
                               int dim, int tp_rank, int tp_size);

// SwiGLU fc1: local [2F/tp, H] = [W_i; V_i]. If w_key == v_key the checkpoint
// holds one [2F, H] tensor (W then V), otherwise two [F, H] tensors.
Result<LocalTensor> SwiGluFc1(const std::string& w_key, const std::string& v_key, DType dtype,
                              void* data, int64_t ffn, Shape trailing, int tp_rank, int tp_size);

// GQA QKV as Megatron holds it: per local query group, the group's
// heads_per_group query heads, then its key head, then its value head, each
// head_dim rows. The checkpoint holds q [heads*d, ...], k and v
// [groups*d, ...] (`trailing` is {hidden} for the weight, {} for the bias).
// REQUIRES: groups divisible by tp_size, heads by groups.
struct GqaDims {
  int64_t heads = 0;
  int64_t groups = 0;
  int64_t head_dim = 0;
};
Result<LocalTensor> GqaQkv(const std::string& q_key, const std::string& k_key,
                           const std::string& v_key, DType dtype, void* data, const GqaDims& dims,
                           Shape trailing, int tp_rank, int tp_size);

// Gated DeltaNet in_proj: components q, k ([key_heads*key_dim] rows each),
// v, z ([value_heads*value_dim] each), beta, alpha ([value_heads] each), in
// one global tensor `key` of [sum, hidden]. conv1d covers q, k, v of
// [q+k+v, 1, kernel] (its `trailing` dims are given).
struct GdnDims {
  int64_t key_heads = 0, key_dim = 0;
  int64_t value_heads = 0, value_dim = 0;
  // The component row counts in order q, k, v, z, beta, alpha.
  std::vector<int64_t> Components() const;
};
Result<LocalTensor> GdnInProj(const std::string& key, DType dtype, void* data, const GdnDims& dims,
                              int64_t hidden, int tp_rank, int tp_size);
Result<LocalTensor> GdnConv1d(const std::string& key, DType dtype, void* data, const GdnDims& dims,
                              Shape trailing, int tp_rank, int tp_size);

}  // namespace shardpoint
