// The data file header that a manifest implies.
#pragma once

#include <cstdint>
#include <string>

#include "src/format/manifest.h"

namespace shardpoint::internal_checkpoint {

// The exact header bytes (length and padded JSON) of data file `file` of `m`,
// as Save and export write them: its chunks and objects in file order, named
// as the planner names them. Any other byte in a file's header — padding,
// __metadata__, order, spacing — is damage that verify reports.
// REQUIRES: file < m.files.size().
std::string ImpliedDataFileHeader(const internal_format::Manifest& m, uint32_t file);

}  // namespace shardpoint::internal_checkpoint
