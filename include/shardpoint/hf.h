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
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "shardpoint/checkpoint.h"
#include "shardpoint/comm.h"
#include "shardpoint/state.h"
#include "shardpoint/status.h"
#include "shardpoint/storage.h"

namespace shardpoint {

// One rule: the shardpoint key `sp` is made of the HF tensors `hf` (patterns
// with {name} placeholders matching decimal numbers).
struct HfRule {
  std::string sp;
  std::vector<std::string> hf;  // one name: a rename; several: fused
  // "concat": the parts concatenated along `dim`; "gqa": q, k, v interleaved
  // per query group (Megatron linear_qkv), see docs/huggingface.md.
  std::string fuse = "concat";
  int dim = 0;
  // Concat part sizes along `dim` for export (ints or variable names); empty:
  // equal parts.
  std::vector<std::string> sizes;
  // gqa: number of query heads and of key/value groups (ints or variable names).
  std::string heads, groups;
  // A placeholder of `hf` absent from `sp` (usually "expert"): the sp tensor
  // stacks its values 0..E-1 along a new leading dim.
  std::string stack;
  // Export only (a rename rule): the HF tensor holds the first `rows` rows of
  // the key (an int or a variable name, usually "vocab_size"): a Megatron
  // vocabulary padded for TP is cut back to the model's. Unset variable: all
  // rows. Empty: all rows.
  std::string rows;
  // Layout hint: "replicated", "column", "row", "vocab", "swiglu", "gqa",
  // "experts_swiglu", "experts_row", "experts_column" (see HfShard).
  std::string split = "replicated";
};

struct HfMapping {
  std::string name;
  std::vector<HfRule> rules;
  // Defaults for variables; HF config.json values and explicit variables win.
  std::map<std::string, int64_t> variables;
  // HF tensors no rule matches keep their name (true) or are an error (false).
  bool keep_unmatched = true;
  // Export only: keys starting with one of these prefixes are left out of the
  // HF model (e.g. "optimizer." in a Megatron checkpoint).
  std::vector<std::string> skip;
};

// Parses a mapping file's JSON; InvalidArgument naming `source` and the rule.
Result<HfMapping> ParseHfMapping(std::string_view json, const std::string& source = "<mapping>");
Result<HfMapping> ReadHfMapping(const std::string& path, Storage* storage = nullptr);
// No rules: HF names are shardpoint keys.
inline HfMapping IdentityHfMapping() { return HfMapping{}; }

// An in-memory HF tensor (for small models and tests).
struct HfTensor {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
  std::string bytes;  // row-major, numel * DTypeSize(dtype)
};

struct HfWriteOptions {
  Storage* storage = nullptr;               // Default: DefaultStorage()
  uint64_t max_shard_size = 5'000'000'000;  // bytes of tensor data per file
  std::map<std::string, std::string> metadata = {{"format", "pt"}};
  std::string config_json;  // written as config.json if not empty
};
// Writes a safetensors model: model.safetensors if it fits one shard, else
// model-0000i-of-0000N.safetensors and model.safetensors.index.json. Tensors
// are stored in natural name order (layer 2 before layer 10).
Status WriteHfModel(const std::string& dir, const std::vector<HfTensor>& tensors,
                    const HfWriteOptions& options = {});

// What an HF model provides, in shardpoint keys.
struct HfKeyInfo {
  std::string key;
  DType dtype = DType::kF32;
  Shape shape;
  std::string split;              // the rule's hint ("replicated" if unmatched)
  int64_t heads = 0, groups = 0;  // gqa rules
  std::vector<std::string> hf;    // the HF tensors it is made of
};

struct HfOptions {
  Storage* storage = nullptr;
  // Variables for the rules (over config.json and the mapping's defaults).
  std::map<std::string, int64_t> variables;
};
Result<std::vector<HfKeyInfo>> DescribeHf(const std::string& hf_dir, const HfMapping& mapping,
                                          const HfOptions& options = {});

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

// Load's options with the defaults of an HF load: every rank reads only the
// bytes of its own boxes (cooperative off, no gap bridging). HF files carry
// no checksums, so verify_checksums has nothing to check.
inline LoadOptions HfDefaultLoadOptions() {
  LoadOptions o;
  o.cooperative = false;
  o.read_gap_bytes = 0;
  return o;
}

struct HfLoadOptions {
  // Storage, threads, allow_* checks, read slices, cooperative reads: as Load.
  LoadOptions load = HfDefaultLoadOptions();
  // Mapping variables ({vocab_size}, ...) beyond those of config.json.
  std::map<std::string, int64_t> variables;
};
// Collective: fills every rank's state from the HF model at `hf_dir`. Rank 0
// reads the headers and broadcasts them (one collective); every rank maps
// them, then the load runs exactly as Load's (the same pipeline): requested
// keys checked (missing, unexpected, dtype, shape), each rank reads the byte
// runs of its own boxes (or, with load.cooperative, each needed byte is read
// once in all and sent to the ranks that need it).
Result<LoadResult> LoadFromHf(State& state, const std::string& hf_dir, const HfMapping& mapping,
                              Comm& comm, const HfLoadOptions& options = {});

// Progress of long operations: bytes done of total (called from worker
// threads, serialized).
using HfProgress = std::function<void(uint64_t done, uint64_t total)>;

struct ExportHfOptions {
  Storage* storage = nullptr;
  uint64_t max_shard_size = 5'000'000'000;
  std::optional<DType> dtype;             // convert floating tensors to this dtype
  int threads = 4;                        // tensors in flight
  size_t block_bytes = size_t{64} << 20;  // a tensor is read and written in blocks of this size
  std::map<std::string, int64_t> variables;
  HfProgress progress;
};
struct ExportHfStats {
  int files = 0;
  int64_t tensors = 0;
  uint64_t bytes = 0;
  double seconds = 0;
};
// Writes the checkpoint at `ckpt_dir` (or an HF model dir) as an HF model at
// `out_dir`, streaming block by block: memory stays near threads *
// block_bytes. Variables come also from the checkpoint's metadata
// ({"hf": {"config": {...}}}, stored by ConvertHfToShardpoint), and that
// config is written back as config.json.
Result<ExportHfStats> ExportHf(const std::string& ckpt_dir, const std::string& out_dir,
                               const HfMapping& mapping, const ExportHfOptions& options = {});

// Offline HF -> shardpoint: one data file, one chunk per row block of each
// mapped tensor; config.json kept in the metadata. Streams like ExportHf.
Result<ExportHfStats> ConvertHfToShardpoint(const std::string& hf_dir, const std::string& ckpt_dir,
                                            const HfMapping& mapping,
                                            const ExportHfOptions& options = {});

// Offline any checkpoint (shardpoint, HF model, PyTorch DCP) -> a PyTorch
// DCP directory in torch 1.13's layout (`.metadata` + `__<n>_0.distcp`), which
// torch.distributed(._shard).checkpoint loads: one tensor item per stored
// chunk, unsharded objects as byte items (their bytes as stored; DCP's
// load_state_dict torch.loads them). Streams like ExportHf (max_shard_size is
// not used). FailedPrecondition if `dcp_dir` exists, for a dtype torch 1.13
// lacks (U16, U32, U64, F8) and for sharded objects, naming it. Common state
// and user metadata are not written (DCP has no place for them).
Result<ExportHfStats> ConvertToDcp(const std::string& src_dir, const std::string& dcp_dir,
                                   const HfMapping& mapping, const ExportHfOptions& options = {});

struct DiffEntry {
  enum Kind { kEqual, kDifferent, kOnlyA, kOnlyB, kMismatch };
  std::string key;
  Kind kind = kEqual;
  double max_abs_diff = 0;  // kDifferent: the largest |a - b| (as f64; inf for NaN vs number)
  int64_t num_different = 0;
  std::string note;  // kMismatch: dtype or shape
};
struct DiffReport {
  std::vector<DiffEntry> entries;  // sorted by key
  bool equal() const;
};
struct DiffOptions {
  Storage* storage = nullptr;
  int threads = 4;
  size_t block_bytes = size_t{32} << 20;
  // |a - b| <= atol counts as equal (0: bitwise).
  double atol = 0;
  std::map<std::string, int64_t> variables;
};
// Compares two checkpoints (shardpoint or HF dirs, any layouts) tensor by
// tensor in shardpoint keys: HF dirs are mapped with `mapping`.
Result<DiffReport> DiffCheckpoints(const std::string& a, const std::string& b,
                                   const HfMapping& mapping, const DiffOptions& options = {});

}  // namespace shardpoint
