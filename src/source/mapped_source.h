// The door for every kind of directory, in shardpoint keys: a shardpoint
// checkpoint (its manifest), an HF model mapped by a mapping (a synthesized
// manifest whose chunks are the pieces, pointing at byte ranges of the HF
// files; they carry no checksums) or a PyTorch DCP directory
// (src/dcp/dcp_dir.h: chunks point into the .distcp files; no checksums
// either). The kind is decided once (DetectCheckpointKind) and the index
// built once, here or in src/source/open_source.h; reads go through the
// ordinary load planner and reader. Used by LoadFromHf, DescribeHf, diff,
// export and both converts.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "shardpoint/checkpoint_kind.h"
#include "shardpoint/hf_mapping.h"
#include "shardpoint/storage.h"
#include "src/format/manifest.h"
#include "src/hf/mapping.h"
#include "src/source/hf_dir.h"
#include "src/source/source.h"

namespace shardpoint::internal_source {

// A Source (src/source/source.h: the index the load pipeline reads) plus
// what the HF tools need beside it.
struct MappedSource : Source {
  bool hf = false;
  std::vector<internal_hf::MappedKey> mapped;  // hf only, parallel to index.tensors
  std::string config_json;  // HF config.json, or the one kept in a checkpoint's metadata
  // Variables the source states (a Megatron torch_dist's args), below config_json.
  internal_hf::Vars source_vars;
};

// The manifest of an HF model under `mapped` (pure).
internal_format::Manifest BuildHfManifest(const HfDirIndex& idx,
                                          const std::vector<internal_hf::MappedKey>& mapped);

// Opens `dir` as any kind, decided once (DetectCheckpointKind), or as `kind`
// already decided: an HF model under `mapping` here, a shardpoint checkpoint
// or a PyTorch DCP directory through OpenCheckpointSource. Variables: see
// ResolveVars.
// `source_vars`: variables another source states (the Megatron checkpoint
// an HF model is compared with), below the HF model's own config.json.
Result<MappedSource> OpenSource(Storage* storage, const std::string& dir, const HfMapping& mapping,
                                const internal_hf::Vars& explicit_vars,
                                const internal_hf::Vars& source_vars = {});
Result<MappedSource> OpenSource(Storage* storage, const std::string& dir, CheckpointKind kind,
                                const HfMapping& mapping, const internal_hf::Vars& explicit_vars,
                                const internal_hf::Vars& source_vars = {});

// An HF model read by one process and broadcast (LoadFromHf): the raw
// headers, file names and config.json as bytes (ReadHfHeaders), and the
// source every rank maps from them.
Result<std::string> ReadHfSourceBytes(Storage* storage, const std::string& dir);
Result<MappedSource> DecodeHfSource(std::string_view bytes, const std::string& dir,
                                    const HfMapping& mapping,
                                    const internal_hf::Vars& explicit_vars);

// The "hf": {"config": ...} object of a checkpoint's metadata, as JSON text.
std::string ConfigFromMetadata(const std::string& metadata_json);

}  // namespace shardpoint::internal_source
