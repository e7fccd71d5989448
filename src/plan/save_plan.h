// The global save plan: pure, deterministic, near-linear in the number of
// regions. Every rank may compute it from the same exchanged contributions
// and obtains the same plan.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "src/format/manifest.h"
#include "src/plan/regions.h"

namespace shardpoint::internal_plan {

struct ObjectDesc {
  std::string key;
  Shape index;
  Shape grid;
  uint64_t nbytes = 0;
};

// What one rank contributes, without memory.
struct Contribution {
  std::vector<RegionDesc> regions;
  std::vector<ObjectDesc> objects;
};

std::string EncodeContribution(const Contribution& c);
Result<Contribution> DecodeContribution(std::string_view bytes, int rank);

// One piece of a rank's data file.
struct WriteItem {
  bool is_object = false;
  int64_t source = 0;   // index into the rank's regions (or objects)
  int64_t record = 0;   // index into manifest.tensors (or manifest.objects)
  int64_t chunk = 0;    // index into that tensor's chunks (tensors only)
  uint64_t offset = 0;  // absolute offset in the rank's file
  uint64_t nbytes = 0;
};

struct RankFile {
  int32_t file = -1;             // index into manifest.files; -1: this rank writes nothing
  std::string header;            // safetensors header, padded to a 4096 multiple
  std::vector<WriteItem> items;  // in file order
  // Replicas this rank holds but another rank writes (offset, nbytes unused);
  // listed only when planned with list_replicas.
  std::vector<WriteItem> replicas;
  uint64_t size = 0;  // header + payload
};

struct SavePlan {
  internal_format::Manifest manifest;  // checksums still 0; common/metadata not set
  std::vector<RankFile> ranks;         // indexed by rank
  uint64_t total_bytes = 0;
  bool lists_replicas = false;
};

// Groups regions by key, checks dtype and global shape agree, deduplicates
// replicas (identical boxes), checks that the distinct boxes tile each tensor
// exactly (sort/sweep, not all pairs), and chooses one writer per box,
// balancing bytes (largest first, least-loaded holder, lowest rank on ties).
// Errors are InvalidArgument and name the key, the ranks and the boxes.
// With list_replicas, every rank's RankFile also lists the replicas it holds
// but does not write (for SaveOptions::verify_replicas).
Result<SavePlan> PlanSave(const std::vector<Contribution>& ranks, bool list_replicas = false);

// The name of a chunk's entry in its data file: "<key>@<chunk>".
std::string ChunkEntryName(const std::string& key, int64_t chunk);
std::string ObjectEntryName(const internal_format::ObjectRecord& o);

}  // namespace shardpoint::internal_plan
