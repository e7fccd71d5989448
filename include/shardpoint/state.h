// State: everything one rank contributes to (or receives from) a checkpoint.
//
// For save, the State describes what this rank holds. For load, it describes
// where this rank wants the data: tensors are filled in place, object bytes,
// the common blob and the metadata are set. Not thread-safe; one State per
// rank per call. The State does not own tensor memory (see LocalTensor).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "shardpoint/box.h"
#include "shardpoint/tensor.h"

namespace shardpoint {

// Opaque bytes with a key, optionally one shard of a grid of objects (per-rank
// RNG state has index {rank} in grid {world}). An unsharded object has empty
// index and grid. Several ranks may provide the same (key, index): they are
// replicas and one copy is stored.
struct Object {
  std::string key;
  std::string bytes;  // save: the bytes; load: filled in
  Shape index;        // this shard's coordinate in `grid` (empty if unsharded)
  Shape grid;         // the grid's shape (empty if unsharded)
};

struct State {
  std::vector<LocalTensor> tensors;
  std::vector<Object> objects;
  // One replicated blob (iteration, scheduler, config). On save, rank 0's is
  // written; on load, every rank that sets it (to anything) receives it.
  std::optional<std::string> common;
  // User metadata as a JSON text (or empty). Save: rank 0's is stored; it
  // must be valid JSON in UTF-8 nested at most 128 deep, else InvalidArgument.
  // Load: filled in.
  std::string metadata_json;
};

}  // namespace shardpoint
