// Writing DCP's `.metadata`: the `Metadata` object (TensorStorageMetadata with
// TensorProperties and ChunkStorageMetadata per item, BytesStorageMetadata,
// and FileSystemWriter's storage_data of MetadataIndex -> _StorageInfo) under
// the class paths of the torch that `md.torch_major` names: 2, torch 2.x's
// torch.distributed.checkpoint, or 1, torch 1.13's
// torch.distributed._shard.checkpoint (each torch reads only its own: see
// docs/dcp.md). Pickled as torch's own pickle.load reads it and
// DecodeDcpMetadata decodes it back to the same DcpMetadata.
#pragma once

#include <string>

#include "shardpoint/status.h"
#include "src/dcp/metadata.h"

namespace shardpoint::internal_dcp {

// FailedPrecondition for a dtype torch 1.13 lacks (naming the tensor);
// InvalidArgument for storage entries that name no tensor chunk or byte item
// and for a torch_major other than 1 or 2.
Result<std::string> EncodeDcpMetadata(const DcpMetadata& md);

}  // namespace shardpoint::internal_dcp
