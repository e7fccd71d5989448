// The cooperative load's piece message: what every rank all-gathers at the
// start of CooperativeLoad (src/checkpoint/cooperative.h), so that every rank
// computes the same assignment of block reads.
//
//   u64 private_bytes       unused by the block exchange (0)
//   u64 count, then per piece of the rank's plan:
//     i64 piece             index into the sender's LoadPlan::pieces
//     i64 tensor, i64 chunk the stored chunk (indices into the manifest)
//     ints offset, ints shape   the piece's box inside the chunk (u8 rank + i64s)
//     u8 dtype              the requested dtype
//     u64 nbytes
//
// Little-endian (src/base/bytes.h). Decoding bounds the count by the bytes
// left before allocating, refuses trailing bytes, negative indices and boxes
// whose offset and shape differ in rank, and names the sending rank.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "shardpoint/box.h"
#include "shardpoint/status.h"

namespace shardpoint::internal_checkpoint {

struct SharedPiece {
  int64_t piece = 0;
  int64_t tensor = 0, chunk = 0;
  Box in_chunk;
  uint8_t dtype = 0;
  uint64_t nbytes = 0;
};

struct PieceMessage {
  uint64_t private_bytes = 0;
  std::vector<SharedPiece> pieces;
};

std::string EncodePieceMessage(const PieceMessage& m);
Result<PieceMessage> DecodePieceMessage(std::string_view bytes, int rank);

}  // namespace shardpoint::internal_checkpoint
