// Writing DCP's `.metadata`: the `Metadata` object of torch 1.13's
// torch.distributed._shard.checkpoint (TensorStorageMetadata with
// TensorProperties and ChunkStorageMetadata per item, BytesStorageMetadata,
// and FileSystemWriter's storage_data of MetadataIndex -> _StorageInfo),
// pickled as torch's own pickle.load reads it and DecodeDcpMetadata decodes
// it back to the same DcpMetadata.
#pragma once

#include <string>

#include "shardpoint/status.h"
#include "src/dcp/metadata.h"

namespace shardpoint::internal_dcp {

// FailedPrecondition for a dtype torch 1.13 lacks (naming the tensor);
// InvalidArgument for storage entries that name no tensor chunk or byte item.
Result<std::string> EncodeDcpMetadata(const DcpMetadata& md);

}  // namespace shardpoint::internal_dcp
