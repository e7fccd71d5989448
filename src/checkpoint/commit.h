// Preparing a checkpoint directory and committing it atomically.
#pragma once

#include <string>

#include "shardpoint/storage.h"
#include "src/format/manifest.h"

namespace shardpoint::internal {

std::string JoinPath(const std::string& dir, const std::string& name);

// Rank 0, before any data is written. Returns the directory the ranks write
// into: `dir` itself, or "<dir>.partial" when overwriting an existing
// checkpoint (which stays intact until the new one is complete).
// FailedPrecondition if `dir` holds a checkpoint and !overwrite. Clears
// leftovers of failed saves (data/ and manifest.tmp of a directory without a
// manifest, which is not a checkpoint).
Result<std::string> PrepareDirectory(Storage* storage, const std::string& dir, bool overwrite);

// Rank 0, after every rank's data file in `write_dir` is durable. See commit.cc.
Status CommitCheckpoint(Storage* storage, const std::string& dir, const std::string& write_dir,
                        const Manifest& manifest);

// The bytes of `dir`/manifest. NotFound if there is none.
Result<std::string> ReadManifestBytes(Storage* storage, const std::string& dir);
// Reads and decodes `dir`/manifest. NotFound if there is none.
Result<Manifest> ReadManifest(Storage* storage, const std::string& dir);

}  // namespace shardpoint::internal
