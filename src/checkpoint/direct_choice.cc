#include "src/checkpoint/direct_choice.h"

namespace shardpoint::internal_checkpoint {

bool UseDirectReads(bool direct_io, bool ranks_read_alone, const internal_format::Manifest& m,
                    const internal_plan::LoadPlan& plan) {
  if (!direct_io || !ranks_read_alone) return direct_io;
  for (const internal_plan::ReadPiece& p : plan.pieces) {
    if (p.nbytes == 0) continue;
    const internal_format::ChunkRecord& c = m.tensors[p.tensor].chunks[p.chunk];
    if (internal_plan::RunsOf(c.box.shape, p.in_chunk).runs > 1) return false;
  }
  return true;
}

}  // namespace shardpoint::internal_checkpoint
