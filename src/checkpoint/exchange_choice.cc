#include "src/checkpoint/exchange_choice.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "src/geometry/flat_range.h"

namespace shardpoint::internal_checkpoint {

using internal_format::ChunkRecord;
using internal_geometry::RowMajorIndex;
using internal_plan::ReadPiece;

uint64_t BytesReadAlone(const internal_format::Manifest& m, const internal_plan::LoadPlan& plan,
                        bool verify) {
  uint64_t total = 0;
  for (const ReadPiece& p : plan.pieces) {
    if (p.nbytes == 0) continue;
    const ChunkRecord& c = m.tensors[p.tensor].chunks[p.chunk];
    const uint64_t es = DTypeSize(m.tensors[p.tensor].dtype);
    const uint64_t unit = verify ? internal_format::VerifyBlock(m, c) : 0;
    if (unit == 0 || p.whole_chunk) {
      total += p.nbytes;
      continue;
    }
    Shape last = p.in_chunk.offset;
    for (size_t d = 0; d < last.size(); ++d) last[d] += p.in_chunk.shape[d] - 1;
    const uint64_t a = static_cast<uint64_t>(RowMajorIndex(c.box.shape, p.in_chunk.offset)) * es;
    const uint64_t b = static_cast<uint64_t>(RowMajorIndex(c.box.shape, last) + 1) * es;
    const uint64_t chunk_bytes = static_cast<uint64_t>(c.box.num_elements()) * es;
    const uint64_t blocks = std::min(chunk_bytes, (b + unit - 1) / unit * unit) - a / unit * unit;
    total += std::max(blocks, p.nbytes);
  }
  return total;
}

Result<bool> ExchangeSavesReads(Comm& comm, const internal_format::Manifest& m,
                                const internal_plan::LoadPlan& plan, bool verify) {
  uint64_t needed = 0;
  for (const ReadPiece& p : plan.pieces) needed += p.nbytes;
  const std::string mine =
      std::to_string(BytesReadAlone(m, plan, verify)) + " " + std::to_string(needed);
  std::vector<std::string> all;
  SP_RETURN_IF_ERROR(comm.AllGather(mine, &all));
  uint64_t alone = 0, need = 0;
  for (size_t r = 0; r < all.size(); ++r) {
    unsigned long long x = 0, y = 0;
    if (std::sscanf(all[r].c_str(), "%llu %llu", &x, &y) != 2) {
      return InternalError("cooperative load: rank " + std::to_string(r) +
                           " sent a malformed read estimate");
    }
    alone += x;
    need += y;
  }
  return static_cast<double>(alone) > 1.05 * static_cast<double>(need);
}

}  // namespace shardpoint::internal_checkpoint
