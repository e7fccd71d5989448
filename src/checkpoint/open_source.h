// Opening a checkpoint directory as a Source (src/source/source.h): its kind
// decided once (DetectCheckpointKind) and its index built once, for every
// reader of a shardpoint checkpoint or a PyTorch DCP directory (Megatron
// torch_dist included): Load, DescribeCheckpoint, and through
// internal_hf::OpenSource (which adds HF models) diff, export and convert.
#pragma once

#include <string>
#include <string_view>

#include "shardpoint/checkpoint_kind.h"
#include "shardpoint/status.h"
#include "shardpoint/storage.h"
#include "src/source/source.h"

namespace shardpoint::internal_checkpoint {

// The index of `dir`, whose kind is `kind`, as bytes one process reads and
// broadcasts: 'D' + the index built from a PyTorch DCP directory, else 'S' +
// the bytes of the manifest file (ReadManifestFile: a swap a crash
// interrupted is completed; no manifest is NotFound naming it), which for
// format v3 is the index (src/checkpoint/manifest_fetch.h reads the shards).
Result<std::string> ReadSourceBytes(Storage* storage, const std::string& dir, CheckpointKind kind);
Result<std::string> ReadSourceBytes(Storage* storage, const std::string& dir);

// The Source those bytes describe (every rank decodes the same bytes).
Result<internal_source::Source> DecodeSource(std::string_view bytes, const std::string& dir);

// In one process (the same Source, with no broadcast): `dir` of a kind
// already decided, or decided here.
Result<internal_source::Source> OpenCheckpointSource(Storage* storage, const std::string& dir,
                                                     CheckpointKind kind);
Result<internal_source::Source> OpenCheckpointSource(Storage* storage, const std::string& dir);

// The Source of `dir` with no index, as a failed decoding leaves it: what its
// errors name it.
internal_source::Source EmptySource(const std::string& dir, bool dcp);

}  // namespace shardpoint::internal_checkpoint
