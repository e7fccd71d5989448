// The commit protocol.
//
// A checkpoint exists if and only if `<dir>/manifest` exists. A save:
//   1. writes every data file `<w>/data/<rank>.safetensors` and fsyncs it
//      (w = dir, or dir.partial when overwriting), then fsyncs `<w>/data`;
//   2. writes the manifest to `<w>/manifest.tmp`, fsyncs it (a large one,
//      format v6: its shards go to `<w>/data/manifest.shards` and the keys'
//      owners' `<w>/data/manifest.<rank>.shards` in step 1 and the manifest
//      is their index; docs/format.md section 3.2, owner_commit.h);
//   3. renames it to `<w>/manifest` and fsyncs `<w>` and its parent (the
//      commit point; the parent makes a new `dir` itself durable);
//   4. when overwriting: swaps `dir` and `dir.partial` in one atomic
//      renameat2(RENAME_EXCHANGE) and fsyncs the parent; `dir.partial` is
//      now the old checkpoint. Where the filesystem cannot exchange: renames
//      `dir` to `dir.old`, `dir.partial` to `dir`, fsyncs the parent. The
//      caller removes the old one (RemoveCheckpoint) once the commit is
//      reported (save.cc): a failure there leaves the new one committed.
// Steps 2 and 3 are Storage::CommitFile (exclusive). On an object store
// (src/objstore/s3_storage.h) each data file is an object completed in step 1
// (a multipart upload is invisible until completed), there are no
// directories to fsync, and 2-3 are one PUT with If-None-Match: *: the
// manifest appears whole, after its data, and of two writers racing for the
// same directory exactly one commits (the other gets FailedPrecondition).
// Object stores cannot rename, so step 4 does not exist there: an overwrite
// is refused in PrepareDirectory before any data is visible (the save runs
// it beside the uploads and completes none before it: held_save.h). There
// PrepareDirectory is one listing of the directory (a manifest? data left by
// a crashed save?): the swap's leftovers and manifest.tmp cannot exist.
// A crash before 3 leaves data files without a manifest: no checkpoint, and
// the previous one (if any, elsewhere or at `dir` when overwriting) intact.
// A crash inside 4 leaves `dir` holding the old or the new checkpoint, both
// complete (with the fallback, a crash between its two renames leaves
// `dir.old` and `dir.partial`, both complete, and no `dir`: the next
// PrepareDirectory or ReadManifest completes the swap, RecoverCheckpointSwap);
// PrepareDirectory of the next overwrite removes the leftovers (one held
// open on NFS or FUSE is moved aside to `dir.stale.N` and removed later).
// Step 4 is SwapIntoPlace (src/io/staged_output.h), which every other output
// (export-hf, the converts) commits through too.
//
// Removing a checkpoint (the old one in 4, retention in manager.cc) runs the
// commit backwards: remove the manifest, fsync the directory, then remove the
// data. A crash in between leaves data without a manifest, which is no
// checkpoint, never a manifest whose data is gone.
#include "src/checkpoint/commit.h"

#include <algorithm>
#include <string>
#include <vector>

#include "src/checkpoint/manifest_io.h"
#include "src/io/path.h"
#include "src/io/staged_output.h"
#include "src/source/manifest_read.h"
#include "src/source/remove_checkpoint.h"

using shardpoint::internal_format::kDataDir;
using shardpoint::internal_format::kManifestName;
using shardpoint::internal_format::Manifest;
using shardpoint::internal_io::JoinPath;
using shardpoint::internal_io::ParentDir;
using shardpoint::internal_io::StripSlashes;
using shardpoint::internal_io::SwapIntoPlace;
using shardpoint::internal_source::HasManifest;
using shardpoint::internal_source::RecoverCheckpointSwap;
using shardpoint::internal_source::RemoveCheckpoint;

namespace shardpoint::internal_checkpoint {
namespace {

constexpr char kStale[] = ".stale.";

// Removes `<dir>.stale.N` left by earlier overwrites, as far as it can (a
// file of one may still be held open).
void SweepStale(Storage* storage, const std::string& dir) {
  const std::string parent = ParentDir(dir);
  const std::string prefix = dir.substr(dir.find_last_of('/') + 1) + kStale;
  Result<std::vector<std::string>> names = storage->ListDir(parent);
  if (!names.ok()) return;
  for (const std::string& name : *names) {
    const std::string n = name.substr(std::min(name.size(), prefix.size()));
    if (!name.starts_with(prefix) || n.empty() ||
        n.find_first_not_of("0123456789") != std::string::npos) {
      continue;
    }
    RemoveCheckpoint(storage, JoinPath(parent, name)).IgnoreError();
  }
}

// Clears `path` (`<dir>.partial` or `<dir>.old`, left by an earlier
// overwrite) for this one: removed, or where it cannot be (a file of it held
// open on NFS or FUSE), moved aside to `<dir>.stale.N` for a later overwrite
// to remove. Else the removal's error.
Status ClearLeftover(Storage* storage, const std::string& dir, const std::string& path) {
  Status removed = RemoveCheckpoint(storage, path);
  if (removed.ok()) return removed;
  for (int n = 1; n <= 100; ++n) {
    const std::string aside = dir + kStale + std::to_string(n);
    Result<bool> taken = storage->Exists(aside);
    if (!taken.ok()) break;
    if (*taken) continue;
    return storage->Rename(path, aside).ok() ? OkStatus() : removed;
  }
  return removed;
}

constexpr char kExistsMessage[] = "' (it has a manifest); save elsewhere or pass overwrite";

// PrepareDirectory where the storage has no rename (an object store): no
// swap leftovers, `.partial` or `manifest.tmp` can exist there (each needs a
// rename), so one listing of `dir` (one LIST request) says whether it holds
// a manifest and whether a crashed save left data to remove.
Result<std::string> PrepareWithoutRename(Storage* storage, const std::string& dir, bool overwrite) {
  SP_RETURN_IF_ERROR(storage->CreateDirs(dir));
  SP_ASSIGN_OR_RETURN(std::vector<std::string> names, storage->ListDir(dir));
  const auto has = [&names](const char* name) {
    return std::find(names.begin(), names.end(), name) != names.end();
  };
  if (has(kManifestName) && !overwrite) {
    return FailedPreconditionError("a checkpoint already exists at '" + dir + kExistsMessage);
  }
  if (has(kManifestName)) {
    return FailedPreconditionError(
        "a checkpoint already exists at '" + dir +
        "' and this storage (an object store) cannot replace it atomically: object stores "
        "have no rename; save to a new directory (CheckpointManager does) or remove it first");
  }
  if (has(kDataDir)) SP_RETURN_IF_ERROR(storage->RemoveAll(JoinPath(dir, kDataDir)));
  return dir;
}

}  // namespace

Result<std::string> PrepareDirectory(Storage* storage, const std::string& dir, bool overwrite) {
  if (!storage->SupportsRename(dir)) return PrepareWithoutRename(storage, dir, overwrite);
  SP_RETURN_IF_ERROR(RecoverCheckpointSwap(storage, dir).status());
  SP_RETURN_IF_ERROR(storage->CreateDirs(dir));
  SP_ASSIGN_OR_RETURN(bool exists, HasManifest(storage, dir));
  if (exists && !overwrite) {
    return FailedPreconditionError("a checkpoint already exists at '" + dir + kExistsMessage);
  }
  const std::string w = exists ? StripSlashes(dir) + ".partial" : dir;
  if (w != dir) {
    SweepStale(storage, StripSlashes(dir));
    SP_RETURN_IF_ERROR(ClearLeftover(storage, StripSlashes(dir), w));
    SP_RETURN_IF_ERROR(ClearLeftover(storage, StripSlashes(dir), StripSlashes(dir) + ".old"));
  }
  SP_RETURN_IF_ERROR(storage->CreateDirs(w));
  SP_RETURN_IF_ERROR(storage->RemoveAll(JoinPath(w, kDataDir)));
  // Not Exists (which follows links): a dangling link left there goes too.
  Status removed = storage->RemoveFile(JoinPath(w, "manifest.tmp"));
  if (!removed.ok() && removed.code() != StatusCode::kNotFound) return removed;
  SP_RETURN_IF_ERROR(storage->CreateDirs(JoinPath(w, kDataDir)));
  return w;
}

Status CommitCheckpoint(Storage* storage, const std::string& dir, const std::string& w,
                        const Manifest& manifest, std::string* previous) {
  previous->clear();
  // A large manifest: its shards go into data/ with the data (format v3).
  SP_ASSIGN_OR_RETURN(std::string top, WriteManifestShards(storage, w, manifest));
  return CommitManifestBytes(storage, dir, w, top, previous);
}

Status CommitManifestBytes(Storage* storage, const std::string& dir, const std::string& w,
                           const std::string& top, std::string* previous) {
  previous->clear();
  SP_RETURN_IF_ERROR(storage->SyncDir(JoinPath(w, kDataDir)));
  // Steps 2 and 3 (on an object store, the one conditional PUT): the
  // manifest, or the index of the shards, is the commit point.
  SP_RETURN_IF_ERROR(storage->CommitFile(JoinPath(w, kManifestName), top, true));
  if (w == dir) return storage->SyncDir(ParentDir(dir));
  // The previous checkpoint ends under the .partial name (exchanged) or .old.
  return SwapIntoPlace(storage, dir, w, previous);
}

Status RemoveFailedSave(Storage* storage, const std::string& dir, const std::string& w) {
  SP_ASSIGN_OR_RETURN(bool committed, HasManifest(storage, w));
  if (committed) return OkStatus();
  if (w != dir) return storage->RemoveAll(w);
  Status first = storage->RemoveAll(JoinPath(w, kDataDir));
  Status tmp = storage->RemoveFile(JoinPath(w, "manifest.tmp"));
  if (first.ok() && tmp.code() != StatusCode::kNotFound) first = tmp;
  return first;  // `dir` itself stays: it may have existed before
}

}  // namespace shardpoint::internal_checkpoint
