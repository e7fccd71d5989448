// One way to commit an output directory: written under "<dst>.partial",
// made durable, then renamed into place, so that a reader never sees a
// half-written output or a mix of two. Used by export-hf and both converts;
// checkpoint saves use the same swap and recovery (src/checkpoint/commit.h).
//
// The protocol, for an output `dst`:
//   1. Begin: completes an overwrite a crash interrupted (RecoverSwap);
//      refuses an existing `dst` that is not an empty directory unless
//      `overwrite` (FailedPrecondition naming it; nothing is written); removes
//      a `<dst>.partial` left by a killed run, and `<dst>.old`; creates
//      `<dst>.partial` (new parents fsynced, Storage::CreateDirs).
//   2. The caller writes every file into dir() and fsyncs it.
//   3. Commit: fsyncs dir(), then renames it to `dst` (a new or empty `dst`)
//      or swaps it with the old output (SwapIntoPlace), fsyncs the parent,
//      and removes the old output.
// A crash before 3 leaves `dst` as it was (absent, or the previous output)
// and a `<dst>.partial` that the next Begin removes; a failure removes it at
// once (the destructor). A crash inside 3 leaves `dst` holding the old or
// the new output, whole (or, with the two-rename fallback, no `dst` and a
// complete `<dst>.partial`, which the next Begin or RecoverSwap renames
// into place).
//
// Where the storage has no rename (an object store, SupportsRename false)
// the output is written in place: Begin refuses a non-empty `dst` even with
// `overwrite` (it cannot be replaced atomically), dir() is `dst`, Commit
// aborts the multipart uploads a crashed earlier run left open under `dst`
// (best effort: cleanup_error()), and a failure removes what was written. The writer's last
// object is then the commit point (a checkpoint's manifest, created
// conditionally; an HF model's index; a DCP directory's .metadata).
#pragma once

#include <functional>
#include <string>

#include "shardpoint/storage.h"

namespace shardpoint::internal_io {

// "<path>" without trailing slashes, and its parent directory ("." if none).
std::string StripSlashes(std::string path);
std::string ParentDir(const std::string& path);

// Puts the complete directory `staged` at `dst`: renamed there when `dst`
// does not exist; else swapped with it by one renameat2(RENAME_EXCHANGE), or
// where the filesystem cannot, `dst` renamed to "<dst>.old" and `staged` to
// `dst`. Fsyncs the parent. `*previous` is where the old `dst` now is ("" if
// there was none) for the caller to remove once the commit is reported.
Status SwapIntoPlace(Storage* storage, const std::string& dst, const std::string& staged,
                     std::string* previous);

// Completes an overwrite that a crash interrupted between the two renames of
// SwapIntoPlace's fallback: when `dst` does not exist but "<dst>.old" and
// "<dst>.partial" do and `complete("<dst>.partial")`, renames the partial to
// `dst` (fsyncing the parent) and removes "<dst>.old" with `remove`. Returns
// whether it did. Does nothing in every other state.
using DirPredicate = std::function<Result<bool>(const std::string& dir)>;
using DirRemover = std::function<Status(const std::string& dir)>;
Result<bool> RecoverSwap(Storage* storage, const std::string& dst, const DirPredicate& complete,
                         const DirRemover& remove);

class StagedOutput {
 public:
  // Step 1 above. `what` names the writer in errors ("export-hf").
  static Result<StagedOutput> Begin(Storage* storage, const std::string& dst, bool overwrite,
                                    const std::string& what);
  StagedOutput(StagedOutput&& other) noexcept;
  StagedOutput& operator=(StagedOutput&&) = delete;
  // Not committed: removes the partial directory (best effort).
  ~StagedOutput();

  const std::string& dir() const { return partial_; }  // write here
  const std::string& dst() const { return dst_; }
  // Step 3 above. The new output is committed once the swap is durable; a
  // failure to remove the old one after that is returned but the new one
  // stays in place.
  Status Commit();
  // After a Commit: what its cleanup could not do ("" if nothing failed); it
  // never fails the committed output.
  const std::string& cleanup_error() const { return cleanup_error_; }

 private:
  StagedOutput(Storage* storage, std::string dst, std::string partial)
      : storage_(storage), dst_(std::move(dst)), partial_(std::move(partial)) {}
  Storage* storage_;
  std::string dst_, partial_;
  bool done_ = false;
  bool in_place_ = false;  // no rename: dir() is dst()
  std::string cleanup_error_;
};

}  // namespace shardpoint::internal_io
