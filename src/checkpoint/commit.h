// Preparing a checkpoint directory and committing it atomically. Reading a
// manifest (and recovering an interrupted swap) is src/source/manifest_read.h;
// removing a checkpoint, src/source/remove_checkpoint.h.
#pragma once

#include <string>

#include "shardpoint/storage.h"
#include "src/format/manifest.h"

namespace shardpoint::internal_checkpoint {

// Rank 0, before any data is written. Returns the directory the ranks write
// into: `dir` itself, or "<dir>.partial" when overwriting an existing
// checkpoint (which stays intact until the new one is complete).
// FailedPrecondition if `dir` holds a checkpoint and !overwrite. Clears
// leftovers of failed saves (data/ and manifest.tmp of a directory without a
// manifest, which is not a checkpoint). An overwrite first removes what earlier
// overwrites left (`dir`.partial, `dir`.old, `dir`.stale.N); one that cannot be
// removed (a file of it held open on NFS or FUSE) is renamed to `dir`.stale.N,
// which a later overwrite removes.
Result<std::string> PrepareDirectory(Storage* storage, const std::string& dir, bool overwrite);

// Rank 0, after every rank's data file in `write_dir` is durable. See commit.cc.
// OK once the new checkpoint is durable at `dir`. An overwrite leaves the
// previous checkpoint at `*previous` (`dir`.old or `dir`.partial) for the
// caller to remove with RemoveCheckpoint, after the commit has been
// reported: that removal failing does not undo the commit. Else `*previous`
// is empty.
Status CommitCheckpoint(Storage* storage, const std::string& dir, const std::string& write_dir,
                        const internal_format::Manifest& manifest, std::string* previous);
// The same, where the manifest's bytes (`top`: a v2 manifest, or an index
// whose shards are already durable in `write_dir`/data) are given.
Status CommitManifestBytes(Storage* storage, const std::string& dir, const std::string& write_dir,
                           const std::string& top, std::string* previous);

// Rank 0, after the agreed failure of a save into `dir` that wrote into `w`
// (PrepareDirectory's result): removes its data files and manifest.tmp, and
// `w` itself when it is the `.partial` of an overwrite. Does
// nothing if `w` holds a manifest (the commit point passed: that is a
// complete checkpoint). Best effort: returns the first error, having tried
// everything.
Status RemoveFailedSave(Storage* storage, const std::string& dir, const std::string& w);

}  // namespace shardpoint::internal_checkpoint
