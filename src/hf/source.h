// A checkpoint to read from, in shardpoint keys: a shardpoint checkpoint (its
// manifest), an HF model mapped by a mapping (a synthesized manifest whose
// chunks are the pieces, pointing at byte ranges of the HF files; they carry
// no checksums) or a PyTorch DCP directory (src/dcp/dcp_dir.h: chunks point
// into the .distcp files; no checksums either). Reads go through the ordinary
// load planner and reader.
#pragma once

#include <string>
#include <vector>

#include "shardpoint/storage.h"
#include "src/format/manifest.h"
#include "src/hf/hf_dir.h"
#include "src/hf/mapping.h"
#include "src/source/source.h"

namespace shardpoint::internal_hf {

// A Source (src/source/source.h: the index the load pipeline reads) plus
// what the HF tools need beside it.
struct MappedSource : internal_source::Source {
  bool hf = false;
  std::vector<MappedKey> mapped;  // hf only, parallel to index.tensors
  std::string config_json;        // HF config.json, or the one kept in a checkpoint's metadata
  Vars
      source_vars;  // variables the source states (a Megatron torch_dist's args), below config_json
};

// The manifest of an HF model under `mapped` (pure).
internal_format::Manifest BuildHfManifest(const HfDirIndex& idx,
                                          const std::vector<MappedKey>& mapped);

// Opens `dir` as any kind, decided once (DetectCheckpointKind): an HF model
// under `mapping` here, a shardpoint checkpoint or a PyTorch DCP directory
// through OpenCheckpointSource (src/checkpoint/open_source.h). Variables:
// see ResolveVars.
Result<MappedSource> OpenSource(Storage* storage, const std::string& dir, const HfMapping& mapping,
                                const Vars& explicit_vars);
Result<MappedSource> SourceFromHfIndex(HfDirIndex idx, const std::string& dir,
                                       const HfMapping& mapping, const Vars& explicit_vars);

// The "hf": {"config": ...} object of a checkpoint's metadata, as JSON text.
std::string ConfigFromMetadata(const std::string& metadata_json);

}  // namespace shardpoint::internal_hf
