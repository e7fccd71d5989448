#include "src/io/staged_output.h"

#include <utility>

#include "src/io/abandoned_writes.h"

namespace shardpoint::internal_io {

std::string StripSlashes(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

std::string ParentDir(const std::string& path) {
  const std::string p = StripSlashes(path);
  const size_t slash = p.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : p.substr(0, slash);
}

Status SwapIntoPlace(Storage* storage, const std::string& dst_in, const std::string& staged,
                     std::string* previous) {
  previous->clear();
  const std::string dst = StripSlashes(dst_in);
  const std::string parent = ParentDir(dst);
  SP_ASSIGN_OR_RETURN(bool exists, storage->Exists(dst));
  if (!exists) {
    SP_RETURN_IF_ERROR(storage->Rename(staged, dst));
    return storage->SyncDir(parent);
  }
  SP_ASSIGN_OR_RETURN(bool swapped, storage->Exchange(dst, staged));
  if (swapped) {
    SP_RETURN_IF_ERROR(storage->SyncDir(parent));
    *previous = staged;  // the old output, now under the staged name
    return OkStatus();
  }
  // A crash between these two renames leaves no `dst`, a complete `staged`
  // and `<dst>.old`: RecoverSwap finishes the job.
  const std::string old = dst + ".old";
  SP_RETURN_IF_ERROR(storage->Rename(dst, old));
  SP_RETURN_IF_ERROR(storage->Rename(staged, dst));
  SP_RETURN_IF_ERROR(storage->SyncDir(parent));
  *previous = old;
  return OkStatus();
}

Result<bool> RecoverSwap(Storage* storage, const std::string& dst_in, const DirPredicate& complete,
                         const DirRemover& remove) {
  const std::string dst = StripSlashes(dst_in);
  const std::string old = dst + ".old", partial = dst + ".partial";
  SP_ASSIGN_OR_RETURN(bool has_dst, storage->Exists(dst));
  if (has_dst) return false;
  SP_ASSIGN_OR_RETURN(bool has_old, storage->Exists(old));
  SP_ASSIGN_OR_RETURN(bool has_partial, storage->Exists(partial));
  if (!has_old || !has_partial) return false;
  SP_ASSIGN_OR_RETURN(bool done, complete(partial));
  if (!done) return false;
  const Status renamed = storage->Rename(partial, dst);
  if (!renamed.ok()) {
    // Another process (a rank of the same job) may have completed it first.
    Result<bool> now = storage->Exists(dst);
    if (now.ok() && *now) return true;
    return renamed.WithContext(
        "an overwrite of '" + dst + "' was interrupted between its renames (" + "'" + old +
        "' holds the previous output, '" + partial + "' the new one); completing it");
  }
  SP_RETURN_IF_ERROR(storage->SyncDir(ParentDir(dst)));
  SP_RETURN_IF_ERROR(remove(old));
  return true;
}

Result<StagedOutput> StagedOutput::Begin(Storage* storage, const std::string& dst_in,
                                         bool overwrite, const std::string& what) {
  const std::string dst = StripSlashes(dst_in);
  if (dst.empty()) return InvalidArgumentError(what + ": the output directory is an empty path");
  const std::string partial = dst + ".partial";
  // The partial of an interrupted swap is complete: the swap starts only
  // once it is committed.
  SP_RETURN_IF_ERROR(RecoverSwap(
                         storage, dst, [](const std::string&) -> Result<bool> { return true; },
                         [storage](const std::string& d) { return storage->RemoveAll(d); })
                         .status());
  SP_ASSIGN_OR_RETURN(bool exists, storage->Exists(dst));
  if (exists) {
    SP_ASSIGN_OR_RETURN(bool is_dir, storage->IsDirectory(dst));
    if (!is_dir) {
      return FailedPreconditionError("'" + dst + "' exists and is not a directory (" + what +
                                     " writes a directory; nothing written)");
    }
    SP_ASSIGN_OR_RETURN(std::vector<std::string> entries, storage->ListDir(dst));
    if (!entries.empty() && !overwrite) {
      return FailedPreconditionError(
          "'" + dst + "' exists and is not empty (" + std::to_string(entries.size()) +
          " entries, e.g. '" + entries.front() + "'): " + what +
          " writes a new directory; pass overwrite (CLI: --overwrite) to replace it whole "
          "(nothing written)");
    }
  }
  if (!storage->SupportsRename(dst)) {
    if (exists) {
      SP_ASSIGN_OR_RETURN(std::vector<std::string> entries, storage->ListDir(dst));
      if (!entries.empty()) {
        return FailedPreconditionError(
            "'" + dst +
            "' is not empty and this storage (an object store) cannot replace it "
            "atomically: object stores have no rename; write to a new prefix or remove it "
            "first (" +
            what + ": nothing written)");
      }
    }
    StagedOutput out(storage, dst, dst);
    out.in_place_ = true;
    return out;
  }
  // Leftovers of a run killed before its commit (the partial) or after its
  // swap (the old output).
  SP_RETURN_IF_ERROR(storage->RemoveAll(partial));
  SP_RETURN_IF_ERROR(storage->RemoveAll(dst + ".old"));
  SP_RETURN_IF_ERROR(storage->CreateDirs(partial));
  return StagedOutput(storage, dst, partial);
}

StagedOutput::StagedOutput(StagedOutput&& other) noexcept
    : storage_(std::exchange(other.storage_, nullptr)),
      dst_(std::move(other.dst_)),
      partial_(std::move(other.partial_)),
      done_(other.done_),
      in_place_(other.in_place_),
      cleanup_error_(std::move(other.cleanup_error_)) {}

StagedOutput::~StagedOutput() {
  if (storage_ != nullptr && !done_) storage_->RemoveAll(partial_).IgnoreError();
}

Status StagedOutput::Commit() {
  if (in_place_) {  // each file is whole once synced; the writer's last one committed
    done_ = true;
    // An object store: every file of this output was completed, so an
    // upload still open under `dst` is a crashed earlier run's (its parts
    // kept and billed, invisible to listings). Best effort, as after a
    // save: a bucket lifecycle rule removes what this cannot.
    cleanup_error_ = AbortAbandonedWritesUnder(storage_, dst_);
    return OkStatus();
  }
  SP_RETURN_IF_ERROR(storage_->SyncDir(partial_));
  std::string previous;
  SP_RETURN_IF_ERROR(SwapIntoPlace(storage_, dst_, partial_, &previous));
  done_ = true;  // committed: from here on the new output stays
  if (previous.empty()) return OkStatus();
  return storage_->RemoveAll(previous).WithContext("committed '" + dst_ +
                                                   "'; removing the output it replaced");
}

}  // namespace shardpoint::internal_io
