// The door (with src/source/mapped_source.h, which adds HF models and the
// mappings): a checkpoint directory opened as a Source (src/source/source.h),
// its kind decided once (DetectCheckpointKind, src/source/kind.cc) and its
// index built once, for every reader of a shardpoint checkpoint or a PyTorch
// DCP directory (Megatron torch_dist included): Load, DescribeCheckpoint,
// VerifyCheckpoint's DCP check, and through OpenSource diff, export and
// convert. A path is opened through the caller's Storage, so an object-store
// prefix (s3://, DefaultStorage) opens the same way.
#pragma once

#include <string>
#include <string_view>

#include "shardpoint/checkpoint_kind.h"
#include "shardpoint/status.h"
#include "shardpoint/storage.h"
#include "src/source/source.h"

namespace shardpoint::internal_source {

// The index of `dir`, whose kind is `kind`, as bytes one process reads and
// broadcasts: 'D' + the index built from a PyTorch DCP directory, else 'S' +
// the bytes of the manifest file (ReadManifestFile: a swap a crash
// interrupted is completed; no manifest is NotFound naming it), which for
// format v3 is the index (src/checkpoint/manifest_fetch.h reads the shards).
Result<std::string> ReadSourceBytes(Storage* storage, const std::string& dir, CheckpointKind kind);
Result<std::string> ReadSourceBytes(Storage* storage, const std::string& dir);

// The Source those bytes describe (every rank decodes the same bytes).
Result<Source> DecodeSource(std::string_view bytes, const std::string& dir);

// In one process (the same Source, with no broadcast, and for a PyTorch DCP
// directory its dcp_entries): `dir` of a kind already decided, or decided
// here.
Result<Source> OpenCheckpointSource(Storage* storage, const std::string& dir, CheckpointKind kind);
Result<Source> OpenCheckpointSource(Storage* storage, const std::string& dir);

// The Source of `dir` with no index, as a failed decoding leaves it: what its
// errors name it.
Source EmptySource(const std::string& dir, bool dcp);

}  // namespace shardpoint::internal_source
