// The per-key steps of save planning, shared by the global planner
// (PlanSave, save_plan.cc) and the distributed one (dist_plan.h), so that both
// check the same things with the same messages: a key's regions agree on
// dtype and global shape, replicas (identical boxes) are grouped, the
// distinct boxes tile the tensor; objects of one (key, index) agree on grid
// and size.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "src/format/manifest.h"
#include "src/plan/save_plan.h"

namespace shardpoint::internal_plan {

struct Holder {
  int rank;
  int64_t source;  // region or object index on that rank (or in its message)
};

struct KeyGroup {
  const RegionDesc* first = nullptr;
  int first_rank = 0;
  struct Entry {
    const Box* box;
    Holder holder;
  };
  std::vector<Entry> entries;
};

// One stored piece (tensor chunk or object) and who could write it.
struct Piece {
  bool is_object;
  int64_t record;
  int64_t chunk;
  uint64_t nbytes;
  std::vector<Holder> holders;  // sorted by rank, one per rank
};

// Adds region `rd` of `rank` to its key's group. InvalidArgument when its box
// lies outside the global shape, or its dtype or global shape differs from
// the key's first region (naming both ranks). `rd` must outlive `g`.
Status AddRegion(const RegionDesc& rd, int rank, int64_t source, KeyGroup* g);

// Deduplicates replicas of one key, checks the tiling and appends its record
// (chunks sorted by box) to m->tensors and its pieces to `pieces`.
Status PlanTensor(const std::string& key, KeyGroup& g, internal_format::Manifest* m,
                  std::vector<Piece>* pieces);

struct ObjectGroups {
  using Id = std::pair<std::string, Shape>;
  std::map<Id, Piece> by_id;
  std::map<Id, const ObjectDesc*> first;
};

// Adds object `o` of `rank`; InvalidArgument when its grid or size differs
// from the first holder's. `o` must outlive `groups`.
Status AddObject(const ObjectDesc& o, int rank, int64_t source, ObjectGroups* groups);
// Appends the objects' records, sorted by (key, index), and their pieces.
void FinishObjects(ObjectGroups& groups, internal_format::Manifest* m, std::vector<Piece>* pieces);

}  // namespace shardpoint::internal_plan
