// Reading a shardpoint checkpoint's manifest: the one way every reader
// (load, verify, the door, the local tier) finds a committed checkpoint in a
// directory, completing first an overwrite that a crash interrupted
// (src/checkpoint/commit.cc has the commit protocol).
#pragma once

#include <optional>
#include <string>

#include "shardpoint/status.h"
#include "shardpoint/storage.h"
#include "src/format/manifest.h"

namespace shardpoint::internal_source {

// Whether `dir` holds a committed checkpoint: its manifest, as is (no swap
// recovery). The one test for a manifest outside kind detection: a save's
// directory, a failed save's leftovers, the manager's complete iterations,
// a local-tier copy.
Result<bool> HasManifest(Storage* storage, const std::string& dir);

// Completes an overwrite of checkpoint `dir` that a crash interrupted
// between the two renames of the fallback (no `dir`; `dir.old` and a
// `dir.partial` holding a manifest): `dir.partial` becomes `dir`, `dir.old`
// is removed. Returns whether it did. PrepareDirectory and ReadManifest call
// it, so the next save or load finds exactly one committed checkpoint.
Result<bool> RecoverCheckpointSwap(Storage* storage, const std::string& dir);

// The bytes of the file `dir`/manifest (after RecoverCheckpointSwap): a v1
// or v2 manifest, or a v3 index. NotFound if there is none.
Result<std::string> ReadManifestFile(Storage* storage, const std::string& dir);
// On a storage that reads a small file whole in one request (an object
// store, src/io/whole_file.h): the bytes of `dir`/manifest read at once, so
// that a reader opening `dir` skips kind detection's existence check when
// there is a manifest. nullopt: no manifest there, or a storage that checks
// first (POSIX: kind detection and ReadManifestFile as always).
Result<std::optional<std::string>> ManifestReadWhole(Storage* storage, const std::string& dir);
// The whole manifest's bytes in the v2 encoding: ReadManifestFile, and for a
// v3 to v6 index every shard, from the shard files it names
// (src/source/manifest_shards.h).
Result<std::string> ReadManifestBytes(Storage* storage, const std::string& dir);
// Reads and decodes the whole manifest (every shard of a v3 to v6 one). NotFound
// if there is none.
Result<internal_format::Manifest> ReadManifest(Storage* storage, const std::string& dir);

}  // namespace shardpoint::internal_source
