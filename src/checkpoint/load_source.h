// The load pipeline: fills every rank's State from a Source (src/source/
// source.h), whatever kind of checkpoint it came from. Load (shardpoint and
// DCP checkpoints) and LoadFromHf (HF models) each build their Source and call
// it; nothing else loads.
//
//   1. every rank checks its requests against the index: missing keys,
//      dtype, global shape (each an error naming the key, unless allowed);
//   2. the ranks all-gather bitmaps of the stored tensors and objects they
//      requested, with their missing keys, or their error (of step 1, or of
//      building the index): stored keys no rank asked for are unexpected
//      (sorted, unique), and one error names the missing and the unexpected
//      keys (unless allowed);                                (all-gather)
//   3. every rank plans its reads (only the byte runs of its own boxes, in
//      covering ranges of whole checksummed blocks), zero-fills what reaches
//      past a stored tensor (allow_shape_mismatch), and reads alone or
//      cooperatively (LoadOptions::cooperative) in slices of
//      read_slice_bytes, verifying checksums where the source has them;
//      then objects and common state.                        (agree)
// Every rank decides the requests' verdict from the same gathered bytes, so
// it needs no agreement of its own: it goes into step 3's. A plan that fails
// on one rank only (out of memory) does too when every rank reads alone; a
// cooperative load agrees on the plans before its exchange (cooperative.h).
// Every local step is Guarded: an exception (bad_alloc included) becomes a
// Status that goes through the agreement, so a failure on any rank is every
// rank's error and no rank hangs.
#pragma once

#include <functional>
#include <string>

#include "shardpoint/checkpoint.h"
#include "src/checkpoint/reader.h"
#include "src/io/resources.h"
#include "src/source/source.h"

namespace shardpoint::internal_checkpoint {

// Places a plan's pieces in place of step 3's reads (the local tier's
// recovery, src/local/local_load.cc, which gets the bytes from the node's
// copy and from peers). `files` are the source's data files. Collective:
// called on every rank once every rank's plan succeeded.
using ExecutePlan =
    std::function<Status(const internal_plan::LoadPlan& plan, DataFiles* files, ThreadPool* pool,
                         const ReadOptions& options, ReadStats* stats)>;

// Collective. REQUIRES: every rank passes an identical `src` (e.g. decoded
// from bytes one rank read and broadcast) and the same options; or, where
// building it failed on this rank, that error as `index_status` (`src` is
// then unused, and the error is every rank's after step 2). `what`
// prefixes step names in errors ("load", "HF load"). Storage and pool come
// from `res` (made from `options` by the entry point). With `execute`, it
// places the tensors (every tensor group is announced after it).
Result<LoadResult> LoadFromSource(State& state, const Status& index_status,
                                  const internal_source::Source& src, Comm& comm,
                                  const LoadOptions& options, internal_io::CallResources& res,
                                  const std::string& what, const ExecutePlan& execute = nullptr);

// Rank 0 passes one line with the load's outcome to res.Log ("shardpoint:
// loaded <name>: ..." or "shardpoint: load of <name> FAILED: ...").
void LogLoadOutcome(const internal_io::CallResources& res, const Comm& comm,
                    const std::string& name, const Result<LoadResult>& result);

}  // namespace shardpoint::internal_checkpoint
