// Where a recovery puts the units it gets (local_load.cc): straight into the
// destination tensors of the load plan, as they arrive, with the load
// pipeline's own placement (reader.h's ExecuteSpans). Nothing is kept for a
// later pass over the data: a unit read from the node's copy is read once,
// and a unit received is placed from the receive buffer of its round.
// Thread-safe: a recovery places its own node's units (FromFiles, on a
// thread of their own) while its rank places the units it receives
// (FromMemory); the units of two calls at once must be disjoint. Both use
// the one ThreadPool (safe for concurrent calls) and ReadStats (atomic).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "shardpoint/storage.h"
#include "src/checkpoint/reader.h"
#include "src/format/manifest.h"
#include "src/local/units.h"
#include "src/plan/load_plan.h"

namespace shardpoint::internal_local {

// A unit and its verified bytes in memory.
using Arrived = std::vector<std::pair<uint32_t, const char*>>;

class Placer {
 public:
  // `storage` and `dir`: the local checkpoint as the plan's source names its
  // files. Everything passed must outlive the Placer.
  Placer(const internal_format::Manifest& m, const UnitTable& ut,
         const internal_plan::LoadPlan& plan, Storage* storage, std::string dir, ThreadPool* pool,
         const internal_checkpoint::ReadOptions& options, internal_checkpoint::ReadStats* stats);

  // Whether unit u is bytes of a tensor chunk (else of an object).
  bool IsTensor(uint32_t u) const { return chunk_of_[u].first >= 0; }

  // Reads tensor units `units` from `files` and places their bytes, every
  // block verified first (a failing block: DataLoss naming it).
  Status FromFiles(internal_checkpoint::DataFiles* files, const std::vector<uint32_t>& units);
  // Places tensor units already verified, from memory.
  Status FromMemory(const Arrived& units);

 private:
  std::vector<internal_checkpoint::ChunkSpan> Spans(const std::vector<uint32_t>& units) const;
  // The plan's pieces that read the chunks of `spans`: a call plans only
  // those (a round places a few units of a plan of many pieces).
  std::vector<const internal_plan::ReadPiece*> PiecesOf(
      const std::vector<internal_checkpoint::ChunkSpan>& spans) const;

  const internal_format::Manifest& m_;
  const UnitTable& ut_;
  Storage* storage_;
  std::string dir_;
  ThreadPool* pool_;
  internal_checkpoint::ReadOptions options_;
  internal_checkpoint::ReadStats* stats_;
  // The plan's pieces by (tensor, chunk).
  std::map<std::pair<int64_t, int64_t>, std::vector<const internal_plan::ReadPiece*>> pieces_;
  std::vector<std::pair<int64_t, int64_t>> chunk_of_;  // per unit: (tensor, chunk), or -1
};

}  // namespace shardpoint::internal_local
