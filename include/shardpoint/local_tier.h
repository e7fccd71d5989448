// The local tier: checkpoints in node-local memory with peer replicas, and
// recovery from them under any layout (docs/local-tier.md).
//
// LocalSave writes an ordinary checkpoint (same format, same block
// checksums) into `<local_root>/iter_<N>/` on every node, without O_DIRECT
// or fsync, then sends each data file to `replicas` other nodes over the
// job's Comm; every received block is checked against its checksum before it
// is written. Each node then writes `<local_root>/iter_<N>/replicas`, the map
// of which nodes hold which data files, last: a node's copy counts only once
// that file exists (its commit point).
//
// LocalLoad fills every rank's State from the surviving copies: each rank
// reads what its own node holds, the bytes it needs that its node lacks are
// sent by a rank on a node that holds them (verified on both sides), and
// only what no surviving node holds (or what every surviving copy of fails
// its checksum) is read from `persistent_dir`, a committed checkpoint of the
// same iteration. World size and layout may differ from the save's.
//
// All calls are collective over `comm`. Nodes: ranks with the same node id
// (LocalTierOptions::node_id, default the hostname) share a node and its
// local root; each rank sees only its own node's root, through
// LocalTierOptions::storage.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "shardpoint/async_save.h"
#include "shardpoint/checkpoint.h"

namespace shardpoint {

// Resources: `storage` is the node-local storage (default POSIX, whose files
// a recovery maps and reads in place; a storage of the caller's is read with
// ReadAt); pool and log as for Save and Load.
struct LocalTierOptions : Resources {
  // This node's local root, the same path on every node. Default
  // "/dev/shm/shardpoint" (memory). A job keeps its own root.
  std::string local_root = "/dev/shm/shardpoint";
  // This rank's node. Default: empty = the hostname. Ranks with equal ids
  // share one local root.
  std::string node_id;
  // Copies of each data file on other nodes (default 1). Fewer when the job
  // has fewer other nodes; 0 keeps node-local copies only.
  int replicas = 1;
  // Replication and recovery move at most this many bytes per rank per
  // round (the memory each rank holds for it, sending and receiving; one
  // AllToAll per round). Default 1 MiB: the round buffers are faulted in
  // once and reused, and every fresh page costs a fault (a recovery of
  // 0.2 GiB on 4 ranks: 1,500 faults and 0.36 CPU s at 1 MiB, 14,000 and
  // 0.58 at 8 MiB; docs/local-tier.md, Measured). Between thread ranks a
  // recovery sends units of a mapped node copy where they lie: those take
  // no round memory and go in one round.
  uint64_t round_bytes = uint64_t{1} << 20;
  // Staging buffer of the local writes (SaveOptions::staging_bytes).
  size_t staging_bytes = size_t{8} << 20;
};

// "<local_root>/iter_0000100": where a node holds the local checkpoint of
// `iteration`.
std::string LocalPath(const LocalTierOptions& options, int64_t iteration);

struct LocalSaveStats {
  SaveStats save;               // the local save (SaveStats of Save)
  uint64_t bytes_sent = 0;      // replica bytes this rank sent
  uint64_t bytes_received = 0;  // replica bytes this rank received and verified
  double replicate_seconds = 0;
};

// Collective: saves `state` as the local checkpoint of `iteration`
// (replacing one of the same iteration), then replicates it.
Result<LocalSaveStats> LocalSave(const State& state, int64_t iteration, Comm& comm,
                                 const LocalTierOptions& options = {});

// Collective: as LocalSave, but the caller waits only for step 0 (one
// all-gather and one agreement: the topology, each node's directory
// cleared) and the copy of its state into `saver`'s staging memory; the
// local save and the replication run in the background (async_save.h: the
// Comm rules). The handle's SaveStats are the local save's. An error of
// step 0 is returned at once, the same on every rank.
Result<SaveHandle> LocalSaveAsync(AsyncSaver& saver, const State& state, int64_t iteration,
                                  Comm& comm, const LocalTierOptions& options = {});

// Collective: the newest iteration whose every data file has a committed
// copy on a node of this job, or nullopt. Every rank gets the same answer.
Result<std::optional<int64_t>> LatestLocal(Comm& comm, const LocalTierOptions& options = {});

// Collective: loads the local checkpoint of `iteration` (see the file
// comment). `persistent_dir`: a committed checkpoint of the same iteration
// (the same manifest), read only for bytes no surviving copy holds; empty =
// none (then such bytes are a DataLoss error naming the file and byte
// range). LoadResult::bytes_local, bytes_peer and bytes_persistent say
// where this rank's bytes came from. `load` applies as for Load, except that
// the reads never bridge gaps nor cooperate, and always verify.
Result<LoadResult> LocalLoad(State& state, int64_t iteration, Comm& comm,
                             const LocalTierOptions& options = {},
                             const std::string& persistent_dir = "", const LoadOptions& load = {});

}  // namespace shardpoint
