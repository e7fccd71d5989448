// Which rank reads which bytes in a cooperative load (LoadOptions::
// cooperative, src/checkpoint/cooperative.h): pure planning, no I/O. Every
// rank computes the same assignment from the all-gathered plans.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "shardpoint/box.h"
#include "src/format/manifest.h"

namespace shardpoint::internal_plan {

// The assignment unit where nothing is verified (a DCP or HF source, or
// verify_checksums off): only the needed bytes inside a unit are read.
constexpr uint64_t kUnverifiedUnit = uint64_t{1} << 20;

// One rank's piece of a chunk.
struct Need {
  int rank = 0;
  int64_t piece = 0;  // index into that rank's plan.pieces
  Box in_chunk;
};

struct ChunkNeeds {
  int64_t tensor = 0, chunk = 0;
  uint64_t unit = 0;        // the assignment unit (bytes): a verification block
  uint64_t es = 0;          // stored element size
  std::vector<Need> needs;  // by rank, then in that rank's plan order
};

// Chunk-relative bytes [a, b), read by one rank.
struct Span {
  size_t chunk = 0;
  uint64_t a = 0, b = 0;
  int reader = 0;
  uint64_t send = 0;  // bytes the reader sends to the other ranks
};

// The flat elements [first, last) of `need`'s piece inside chunk bytes [a, b).
std::pair<int64_t, int64_t> FlatIn(const Shape& cs, const ChunkNeeds& cn, const Need& need,
                                   uint64_t a, uint64_t b);

// The spans of `chunks` (in file order) and who reads each, for `ranks`
// ranks: every unit (chunks[i].unit bytes) that some rank needs lies in
// exactly one span, read by one rank. Walking the units in file order: in a
// chunk whose every unit one rank needs, that rank reads it; in a chunk with
// a shared unit, each unit goes to the reader of the previous one (if it
// needs some of the chunk, or is a preferred reader of the unit: one needing
// at least half of what the unit's most needing rank does) while that one
// stays within a slack (1/16 of an even share, at least a unit, at most
// cooperative_round_bytes / 4) of the least loaded preferred reader, else to
// that one. So reads stay contiguous (few large requests; a chunk cut among
// the ranks along another dim is not read in pieces by each of them) and the
// loads level out to within the slack. A span holds at most
// cooperative_round_bytes / 4 bytes (one unit at least).
std::vector<Span> AssignSpans(const internal_format::Manifest& m,
                              const std::vector<ChunkNeeds>& chunks, int ranks,
                              uint64_t cooperative_round_bytes);

}  // namespace shardpoint::internal_plan
