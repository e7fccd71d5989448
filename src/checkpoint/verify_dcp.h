// Verify for a PyTorch DCP directory (src/dcp/). DCP stores no checksums of
// its own, so this checks what it does store: the structure (.metadata and
// every tensor item's zip and data.pkl decode; see docs/dcp.md), item bounds,
// that every global tensor is covered exactly by its chunks, and the CRC-32
// that torch.save's zip records for every tensor storage entry.
#pragma once

#include <string>

#include "shardpoint/storage.h"
#include "src/checkpoint/verify.h"

namespace shardpoint::internal_checkpoint {

// `dir` is opened through the door (src/source/open_source.h) as a PyTorch
// DCP directory: the caller has decided its kind. Faults go in the report (an
// index that cannot be built, `.metadata` missing or unreadable included, is
// one fault). `options` as VerifyCheckpoint (threads are not used: entries
// are read one after another).
Result<VerifyReport> VerifyDcp(Storage* storage, const std::string& dir,
                               const VerifyOptions& options = {});

}  // namespace shardpoint::internal_checkpoint
