// DCP's `.metadata` file: the pickled `Metadata` object that PyTorch's
// distributed checkpoint writes beside its `.distcp` files, decoded with the
// restricted pickle reader into plain structs.
//
// Layouts read: torch 1.13 (`torch.distributed._shard.checkpoint`) and torch
// 2.x (`torch.distributed.checkpoint`), as far as their classes are listed in
// DcpMetadataClassAllowed. Errors: DataLoss for malformed or inconsistent
// metadata, FailedPrecondition for a class or feature not read (naming it).
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "shardpoint/box.h"
#include "shardpoint/dtype.h"
#include "shardpoint/status.h"

namespace shardpoint::internal_dcp {

inline constexpr char kDcpMetadataName[] = ".metadata";

// The modules that hold DCP's classes, per torch major version. torch 2.x
// keeps 1.13's names only as an alias package: unpickled from there,
// MetadataIndex is another class than its reader's own, equal to none of its
// keys, so the writer names each torch's own modules.
struct DcpModules {
  std::string_view metadata;    // Metadata, MetadataIndex, *StorageMetadata
  std::string_view properties;  // TensorProperties and the memory-format enum
  std::string_view filesystem;  // _StorageInfo
};
inline constexpr DcpModules kDcpTorch1{"torch.distributed._shard.checkpoint.metadata",
                                       "torch.distributed._shard.sharded_tensor.metadata",
                                       "torch.distributed._shard.checkpoint.filesystem"};
inline constexpr DcpModules kDcpTorch2{"torch.distributed.checkpoint.metadata",
                                       "torch.distributed.checkpoint.metadata",
                                       "torch.distributed.checkpoint.filesystem"};

struct DcpTensorMeta {
  std::string fqn;
  DType dtype = DType::kF32;
  Shape shape;
  std::vector<Box> chunks;  // as stored (offsets, sizes), in metadata order
};

// Where one item's bytes are: `length` bytes at `offset` of `relative_path`.
struct DcpStorageInfo {
  std::string relative_path;
  uint64_t offset = 0;
  uint64_t length = 0;
  std::vector<std::string> transforms;  // torch 2.x transform descriptors (none read)
};

struct DcpMetadata {
  int torch_major = 1;                 // 1: torch 1.13 classes, 2: torch 2.x classes
  std::vector<DcpTensorMeta> tensors;  // sorted by fqn
  std::vector<std::string> bytes;      // fqns of byte items, sorted
  // Keyed by (fqn, chunk offset); byte items have an empty offset.
  std::map<std::pair<std::string, Shape>, DcpStorageInfo> storage;
  // Megatron-Core (<= 0.15) `mcore_data`: fqn -> the original global shape of
  // an N-D flattened tensor stored reformulated (src/dcp/nd_flattened.h).
  std::map<std::string, Shape> nd_flattened;
};

// Megatron-Core 0.15's root class, a subclass of torch 2.x's Metadata with
// the field `mcore_data` (earlier releases set that field on a plain Metadata).
inline constexpr std::string_view kMCoreMetadataModule =
    "megatron.core.dist_checkpointing.strategies.torch";

// The classes and functions a `.metadata` pickle may name.
bool DcpMetadataClassAllowed(std::string_view module, std::string_view name);
// Whether `name` ("float32", ...) is a torch dtype a pickle may name.
bool IsTorchDType(std::string_view name);
// The dtype named by a pickled torch dtype ("torch.float32", ...).
Result<DType> DTypeFromTorchName(std::string_view full_name);

// `what` names the file in errors.
Result<DcpMetadata> DecodeDcpMetadata(std::string_view bytes, const std::string& what);

}  // namespace shardpoint::internal_dcp
