// Hugging Face interop: safetensors models as the source of a sharded load,
// export of a checkpoint to a safetensors model, offline conversion and diff.
//
// An HF model directory holds model.safetensors, or model-0000i-of-0000N
// .safetensors files with model.safetensors.index.json, and usually
// config.json. A mapping (rules/*.json, docs/huggingface.md) says which HF
// tensors make which shardpoint global tensor: renames with {layer} /
// {expert} placeholders, concatenations along a dim (SwiGLU gate + up), GQA
// interleaving (q, k, v -> Megatron linear_qkv) and stacking of per-expert
// tensors into one [E, ...] tensor. Every mapped shardpoint tensor is a set
// of pieces, each a box of the global tensor held by a contiguous byte range
// of an HF file, so a sharded load reads only the bytes of its own shards
// with the ordinary load planner, and an export writes every HF tensor from
// the boxes that make it.
//
// All functions are thread-safe (they share no state); LoadFromHf is
// collective over its Comm, the others are local (one process).
//
// This header includes the five that hold them, one concept each:
//   shardpoint/hf_mapping.h  HfRule, HfMapping, ParseHfMapping, ReadHfMapping
//   shardpoint/hf_write.h    HfTensor, WriteHfModel
//   shardpoint/hf_load.h     HfKeyInfo, DescribeHf, HfShard, HfLoadOptions, LoadFromHf
//   shardpoint/hf_export.h   ExportHf, ConvertHfToShardpoint, ConvertToDcp
//   shardpoint/diff.h        DiffCheckpoints
#pragma once

#include "shardpoint/diff.h"
#include "shardpoint/hf_export.h"
#include "shardpoint/hf_keys.h"
#include "shardpoint/hf_load.h"
#include "shardpoint/hf_mapping.h"
#include "shardpoint/hf_write.h"
