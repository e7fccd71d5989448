// Save and Load: the collective entry points.
//
// Save writes every rank's State into checkpoint directory `dir` and commits
// it atomically: data files first (fsynced), then the manifest under a
// temporary name, fsynced and renamed, then the directory fsynced. A
// directory without a manifest is not a checkpoint. Load fills every rank's
// State from `dir`, under any layout, reading only the bytes it needs.
//
// Both are collective over `comm`: every rank calls them with its own State.
// A failure on any rank makes every rank return an error (no hang), and a
// failed save never creates or damages a manifest.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "shardpoint/comm.h"
#include "shardpoint/plan_cache.h"
#include "shardpoint/resources.h"
#include "shardpoint/state.h"
#include "shardpoint/status.h"
#include "shardpoint/storage.h"

namespace shardpoint {

// Resources (resources.h): storage, pool (writes and replica checksums run
// on it; io_threads when none is passed, default 4), and log: one line on
// rank 0 when the save is committed (with its duration and size) or when it
// failed; never "saved" before the manifest is durable.
struct SaveOptions : Resources {
  // Size of one staging buffer. Default 8 MiB (a multiple of 4096).
  size_t staging_bytes = size_t{8} << 20;
  // Try O_DIRECT for data files (falls back to buffered writes). Default true.
  bool direct_io = true;
  // Allocate each data file's space before writing it (fallocate): a full disk
  // fails before any data is written, and the file gets large extents.
  // Default true; ignored where the filesystem lacks fallocate.
  bool preallocate = true;
  // Replace an existing checkpoint at `dir`. Default false: an existing
  // manifest is a FailedPrecondition error and nothing is touched.
  bool overwrite = false;
  // Compare checksums of replicas of the same box and fail on a mismatch
  // (catches silent data-parallel desync, and ranks that declare the same box
  // of a key with different data). Default true: it costs one checksum pass
  // over the replicas a rank holds but does not write, and one all-to-all
  // that sends those checksums to the keys' owners, which compare them;
  // false stores one copy of each replica unchecked. The same on every rank.
  bool verify_replicas = true;
  // Reuse the global plan while the state's structure is unchanged (see
  // plan_cache.h). Pass the same cache to every save of this rank. Default:
  // nullptr = plan every save.
  SavePlanCache* plan_cache = nullptr;
};

struct SaveStats {
  uint64_t bytes_written = 0;  // tensor and object payload bytes, all ranks
  uint64_t rank_bytes = 0;     // payload bytes this rank wrote
  int num_files = 0;
  int64_t num_chunks = 0;
  double seconds = 0;        // wall time of the whole collective call
  double plan_seconds = 0;   // planning: the exchanges with the keys' owners and this rank's plan
  bool plan_cached = false;  // the plan came from SaveOptions::plan_cache
  // Payload bytes this rank sent and received while planning (its shares to
  // the keys' owners and the owners' replies; 0 when the plan was cached).
  uint64_t plan_bytes_sent = 0, plan_bytes_received = 0;
  // Rank 0, cleanup after the commit that failed: an overwrite's previous
  // checkpoint could not be removed (e.g. a file of it held open on NFS or
  // FUSE): why, and where it is left; or, on an object store, the multipart
  // uploads a crashed earlier save left open under the directory could not
  // be aborted. Empty otherwise. The save is still OK: the new checkpoint is
  // complete and durable.
  std::string cleanup_error;
};

// Resources (resources.h): storage, pool (reads and checksums run on it;
// io_threads when none is passed, default 4), and log: one line on rank 0
// when the load finished or failed.
struct LoadOptions : Resources {
  // Requested keys absent from the checkpoint are skipped (and reported)
  // instead of an error. Default false: NotFound naming every rank's missing
  // keys (and the unexpected ones too, unless allowed).
  bool allow_missing_keys = false;
  // Stored keys no rank requested are reported instead of an error. Default
  // false: InvalidArgument naming them.
  bool allow_unexpected_keys = false;
  // Convert stored dtypes to the requested ones. Default false: mismatch errors.
  bool allow_dtype_conversion = false;
  // Load a tensor whose requested global shape differs from the stored one in
  // some dims (not in rank), e.g. a vocabulary padded for another TP size: the
  // overlap of the requested box with the stored extent is loaded and the rest
  // of the requested box is set to zero. Default false: a mismatch errors.
  bool allow_shape_mismatch = false;
  // A requested common blob (State::common set) that the checkpoint does not
  // hold is not a missing key: State::common is reset to std::nullopt. For
  // callers that always ask for the common state and accept checkpoints
  // written without one. Default false: it is a missing key "<common>".
  bool common_optional = false;
  // Verify every byte the load returns: each read covers whole checksummed
  // blocks (1 MiB in format v2; the whole chunk in v1 checkpoints), each
  // checked as it is placed (a mismatch fails the load). Default true; false
  // reads only the needed bytes, unchecked.
  bool verify_checksums = true;
  // The largest read request, per I/O thread: stored bytes are read (and
  // hashed) in requests of at most this size, so load memory does not grow
  // with the chunk size. Default 1 MiB, one verification block: a request
  // then mostly falls inside one chunk and is read straight into its destination,
  // and what is staged is hashed and placed while in the core's cache
  // (docs/performance.md#tuning). Raise it for storage
  // where each request costs a round trip that the I/O threads cannot hide.
  uint64_t read_slice_bytes = uint64_t{1} << 20;
  // The reads of a file are announced to the storage (ReadableFile::Prefetch)
  // in windows of this many bytes, one window ahead: the POSIX storage has
  // the kernel fetch each window in large requests in the background while
  // the I/O threads read and verify the one before. 0: no announcements.
  // Default 16 MiB.
  uint64_t prefetch_bytes = uint64_t{16} << 20;
  // Needed byte ranges of a file separated by at most this many unneeded
  // bytes are read in one request where they lie in one read_slice_bytes
  // unit of a chunk (an unverified load cut along another dim, strips of
  // every row: a request per unit, not per strip), and elsewhere as long as
  // such unneeded bytes stay within 5% of the needed ones: fewer, larger
  // requests, on network filesystems above all. Default 256 KiB; 0 reads no
  // unneeded bytes except whole verified blocks.
  uint64_t read_gap_bytes = uint64_t{256} << 10;
  // O_DIRECT reads of data files where storage and filesystem allow it (else
  // buffered): no page cache, no read-ahead; aligned middles land in place,
  // ends go through a 1 MiB aligned buffer per thread. Several ranks without
  // the block exchange whose pieces are strips of chunks read buffered (they
  // share blocks in the cache). Default false here; Python's load turns it on
  // for local shardpoint checkpoints (docs/performance.md).
  bool direct_io = false;
  // Block exchange: when several ranks need bytes of the same verified
  // block (replicas, e.g. the DP copies of a TP shard, or strips of a chunk
  // saved along another dim), exactly one of them reads and verifies the
  // block and sends every other rank the bytes it needs from it over the
  // Comm (in bounded rounds): the ranks together read each needed block
  // once, each about 1/N. Costs one all-gather of every rank's read list.
  // Must be the same on every rank. Default true; false: every rank reads
  // (and verifies) every block it needs from storage itself. An exchange
  // plans every rank's pieces on every rank, so each rank must hold every
  // rank's records: a checkpoint whose manifest shards total more than
  // 64 MiB (a 70B model saved by tens of thousands of ranks) is loaded as
  // with false, each rank getting only its own records (docs/architecture.md).
  bool cooperative = true;
  // Upper bound of the bytes moved between ranks per cooperative round (all
  // ranks together, plus at most one span of a quarter of it); the reads of
  // the next round run during a round's exchange, so up to two rounds are
  // held. Default 256 MiB.
  uint64_t cooperative_round_bytes = uint64_t{256} << 20;
  // Tensor groups, announced as they complete: tensor_groups[i] is the group
  // (>= 0) of state.tensors[i]; the load reads group 0's tensors, calls
  // on_group_loaded(0) once every byte of them is placed (and verified), then
  // reads group 1's (nothing of it before that call returns: a caller may
  // hand a copied group's memory to a later group), and so on up to the
  // largest group, each called once
  // (a group whose tensors need no bytes too). A caller that stages device
  // tensors in host memory copies one group to the device while the next is
  // read. A cooperative load reads in its own order (file order, in rounds)
  // and calls each group once, after the round that places its last bytes:
  // in the order the groups complete, not by number. Called from the thread
  // running Load; it must not throw. Empty (the
  // default): one read of everything, no calls. Otherwise its size must be
  // state.tensors.size() (InvalidArgument).
  std::vector<int> tensor_groups;
  std::function<void(int)> on_group_loaded;
};

struct LoadResult {
  std::vector<std::string> missing_keys;     // requested but not stored (sorted)
  std::vector<std::string> unexpected_keys;  // stored but requested by no rank (sorted)
  uint64_t bytes_read = 0;                   // from storage, by this rank
  uint64_t bytes_received = 0;               // from other ranks (cooperative load)
  // Read requests (ReadAt calls) this rank made to storage, and the bytes of
  // the pieces it read them for (cooperative: the bytes any rank needs in
  // the blocks it read; summed over ranks, the needed stored bytes):
  // bytes_read / bytes_needed is the read amplification (whole checksummed
  // blocks, bridged gaps).
  uint64_t requests = 0;
  uint64_t bytes_needed = 0;
  // Where this rank's bytes came from (local_tier.h). Load: every byte is
  // the checkpoint's own, counted in bytes_persistent (= bytes_read).
  // LocalLoad: bytes_local from this rank's node's memory, bytes_peer sent by
  // a rank of another node from its node's copy, bytes_persistent read by
  // this rank from the persistent checkpoint (summed over ranks: what the
  // job read from it).
  uint64_t bytes_local = 0;
  uint64_t bytes_peer = 0;
  uint64_t bytes_persistent = 0;
  double seconds = 0;
};

Result<SaveStats> Save(const State& state, const std::string& dir, Comm& comm,
                       const SaveOptions& options = {});
Result<LoadResult> Load(State& state, const std::string& dir, Comm& comm,
                        const LoadOptions& options = {});

}  // namespace shardpoint
