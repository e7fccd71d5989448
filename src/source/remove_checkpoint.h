// Removing a checkpoint directory: the commit protocol run backwards
// (src/checkpoint/commit.cc), used by overwrites, retention, the local tier
// and the recovery of an interrupted swap (src/source/manifest_read.h).
#pragma once

#include <string>

#include "shardpoint/status.h"
#include "shardpoint/storage.h"

namespace shardpoint::internal_source {

// Removes checkpoint directory `dir` so that no crash at any point leaves it
// looking complete without its data: removes `dir`/manifest, fsyncs `dir`,
// then removes the rest (whose order a filesystem chooses: ext4 lists in hash
// order, which may put data/ first). OK if `dir` does not exist.
Status RemoveCheckpoint(Storage* storage, const std::string& dir);

}  // namespace shardpoint::internal_source
