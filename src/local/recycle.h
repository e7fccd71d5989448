// Writing a local checkpoint into the memory of one that retention removes.
//
// A fresh tmpfs page costs an allocation (about a fifth of a local write on
// this project's VM); the pages of an old local checkpoint are freed by
// retention right after the next save commits. With a retention policy (the
// TieredManager's keep_local), a local save's step 0 on each node's first
// rank picks the checkpoint retention would remove after this save and moves
// its data files to "<dir>/spare" (its replica map removed first, then its
// manifest, so it never counts nor loads once a byte of it is overwritten);
// the node storage (node_storage.h) then renames a spare file into place for
// each data file the save writes there and writes over its pages.
//
// Crash safety: the newest committed local checkpoint of the node is never
// picked, so a job killed while it writes over a spare still recovers that
// one; the picked one disappears when the save starts instead of after it
// commits (retention keeps keep_local - 1 during the save).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "shardpoint/storage.h"

namespace shardpoint::internal_local {

inline constexpr char kSpareDirName[] = "spare";

// What retention will keep: the newest `keep` committed local checkpoints
// (the one being saved among them) and the busy ones (a drain's).
struct RecyclePolicy {
  int keep = 1;
  std::vector<int64_t> busy;
};

// On a node: the local checkpoint (committed, or a killed save's leftover)
// that a save of `iteration` may write over: one retention removes once that
// save commits, older than the node's newest committed one, not busy; the
// newest such. nullopt where there is none.
Result<std::optional<int64_t>> PickRecyclable(Storage* node, int64_t iteration,
                                              const RecyclePolicy& policy);

// Moves `victim`'s data files into "<dir>/spare" (see above) and removes
// the rest of it. `dir`: "/iter_..." of the save, created.
Status MoveToSpare(Storage* node, int64_t victim, const std::string& dir);

}  // namespace shardpoint::internal_local
