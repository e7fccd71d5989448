// Draining a local checkpoint into a persistent checkpoint directory
// (tiered_manager.h): each rank copies, in a thread of its own that uses no
// Comm, the data files its node holds as their first holder (the file's own
// node in the replica map), split among the node's ranks; every
// verification unit is checked against the manifest's checksum as it is
// read, so a corrupted local copy never becomes a committed persistent
// checkpoint. Each file is written, fsynced and closed in the persistent
// storage's directory that PrepareDirectory returned; the manager commits
// it (CommitCheckpoint) once every rank reports its copy done.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "shardpoint/storage.h"
#include "src/format/manifest.h"

namespace shardpoint::internal_local {

struct Drain {
  int64_t iteration = 0;
  std::string dir;        // the persistent checkpoint directory
  std::string write_dir;  // where the data files go (PrepareDirectory)
  internal_format::Manifest manifest;
  std::thread thread;
  std::atomic<bool> done{false};
  Status status;       // the thread's outcome; read once `done`
  uint64_t bytes = 0;  // bytes this rank copied
  ~Drain() {
    if (thread.joinable()) thread.join();
  }
};

// The data files (manifest file indices) this rank drains: those whose first
// holder in `map_nodes` (per file, the node ids holding it, replica map
// order) is `node_id`, the i-th of them to the rank with local index
// i % node_ranks.
std::vector<uint32_t> DrainFiles(const std::vector<std::vector<std::string>>& map_nodes,
                                 const std::string& node_id, int local_index, int node_ranks);

// Copies `files` of the local checkpoint `local_dir` on `node` to
// d->write_dir on `persistent`, at most `bytes_per_second` (0: no bound).
// Sets d->status, d->bytes; the caller sets d->done.
void CopyFiles(Storage* node, const std::string& local_dir, Storage* persistent,
               const std::vector<uint32_t>& files, uint64_t bytes_per_second, Drain* d);

}  // namespace shardpoint::internal_local
