// Offline conversions, streaming block by block with bounded memory: a
// checkpoint (shardpoint, HF, PyTorch DCP / Megatron torch_dist) to a Hugging
// Face model (ExportHf), an HF model to a shardpoint checkpoint
// (ConvertHfToShardpoint), and any of them to a PyTorch DCP directory
// (ConvertToDcp). Local (one process).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include "shardpoint/checkpoint_kind.h"
#include "shardpoint/dtype.h"
#include "shardpoint/hf_mapping.h"
#include "shardpoint/resources.h"
#include "shardpoint/status.h"
#include "shardpoint/storage.h"

namespace shardpoint {

// Progress of long operations: bytes done of total (called from worker
// threads, serialized).
using HfProgress = std::function<void(uint64_t done, uint64_t total)>;

// Resources (resources.h): storage, pool (blocks are read, converted and
// written on it and on the calling thread; without one the call makes
// io_threads - 1 threads, so io_threads blocks are in flight), log: one line
// with the outcome.
struct ExportHfOptions : Resources {
  uint64_t max_shard_size = 5'000'000'000;
  std::optional<DType> dtype;  // convert floating tensors to this dtype
  // Deprecated spelling of io_threads, kept so that old code compiles: when
  // > 0 it is used instead of io_threads. Default 0.
  int threads = 0;
  size_t block_bytes = size_t{64} << 20;  // a tensor is read and written in blocks of this size
  std::map<std::string, int64_t> variables;
  HfProgress progress;
  // ConvertToDcp: the torch whose DCP reads the output. 2 (default): torch
  // 2.x's class paths (torch.distributed.checkpoint); 1: torch 1.13's
  // (torch.distributed._shard.checkpoint). Neither torch loads the other's.
  int dcp_torch_major = 2;
  // Every conversion writes "<out>.partial" and renames it to <out> once
  // complete and durable. An existing <out> that is not an empty directory
  // is refused (FailedPrecondition naming it, nothing written) unless
  // `overwrite`, which replaces it whole in one atomic swap (CLI:
  // --overwrite); a reader sees the old output or the new one, never a mix.
  bool overwrite = false;
};
struct ExportHfStats {
  // What the source directory was, as the door decided when it opened it
  // (DetectCheckpointKind, once).
  CheckpointKind source_kind = CheckpointKind::kNone;
  int files = 0;
  int64_t tensors = 0;
  uint64_t bytes = 0;
  double seconds = 0;
};
// Writes the checkpoint at `ckpt_dir` (or an HF model dir) as an HF model at
// `out_dir`, streaming block by block: memory stays near io_threads *
// block_bytes (with a shared pool: its threads + 1, times block_bytes). Variables come also from
// the checkpoint's metadata
// ({"hf": {"config": {...}}}, stored by ConvertHfToShardpoint), and that
// config is written back as config.json.
Result<ExportHfStats> ExportHf(const std::string& ckpt_dir, const std::string& out_dir,
                               const HfMapping& mapping, const ExportHfOptions& options = {});

// Offline HF -> shardpoint: one data file, one chunk per row block of each
// mapped tensor; config.json kept in the metadata. Streams like ExportHf.
Result<ExportHfStats> ConvertHfToShardpoint(const std::string& hf_dir, const std::string& ckpt_dir,
                                            const HfMapping& mapping,
                                            const ExportHfOptions& options = {});

// Converts `src_dir` by what it is, decided once when it is opened: a
// shardpoint checkpoint to an HF model at `dst` (as ExportHf), an HF model or
// a PyTorch DCP directory (Megatron torch_dist included) to a shardpoint
// checkpoint (as ConvertHfToShardpoint). stats.source_kind says which (the
// CLI's `convert`).
Result<ExportHfStats> Convert(const std::string& src_dir, const std::string& dst,
                              const HfMapping& mapping, const ExportHfOptions& options = {});

// Offline any checkpoint (shardpoint, HF model, PyTorch DCP) -> a PyTorch
// DCP directory (`.metadata` + `__<n>_0.distcp`, FileSystemWriter's layout),
// which torch 2.x's torch.distributed.checkpoint loads (or, with
// options.dcp_torch_major = 1, torch 1.13's
// torch.distributed._shard.checkpoint): one tensor item per stored
// chunk, unsharded objects as byte items (their bytes as stored; DCP's
// load_state_dict torch.loads them). Streams like ExportHf (max_shard_size is
// not used). U16/U32/U64 (torch >= 2.3) and F8 (>= 2.1) tensors are written
// as torch 2.x saves them (`_rebuild_tensor_v3`). FailedPrecondition if
// `dcp_dir` exists (and not `overwrite`), for those dtypes with dcp_torch_major = 1 (torch 1.13
// lacks them) and for sharded objects, naming it. Common state
// and user metadata are not written (DCP has no place for them).
Result<ExportHfStats> ConvertToDcp(const std::string& src_dir, const std::string& dcp_dir,
                                   const HfMapping& mapping, const ExportHfOptions& options = {});

}  // namespace shardpoint
