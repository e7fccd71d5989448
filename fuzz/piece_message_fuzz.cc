// libFuzzer target for the cooperative load's piece message (what every rank
// all-gathers at the start of a cooperative load;
// src/checkpoint/piece_message.h). Whatever decodes must re-encode to exactly
// the same bytes (one encoding, trailing bytes refused) and hold only
// well-formed pieces; anything else must be a typed error.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "src/checkpoint/piece_message.h"

using shardpoint::internal_checkpoint::DecodePieceMessage;
using shardpoint::internal_checkpoint::EncodePieceMessage;
using shardpoint::internal_checkpoint::PieceMessage;
using shardpoint::internal_checkpoint::SharedPiece;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  shardpoint::Result<PieceMessage> m = DecodePieceMessage(in, 2);
  if (!m.ok()) {
    if (m.status().code() != shardpoint::StatusCode::kDataLoss) std::abort();
    return 0;
  }
  for (const SharedPiece& p : m->pieces) {
    if (p.piece < 0 || p.tensor < 0 || p.chunk < 0) std::abort();
    if (p.in_chunk.offset.size() != p.in_chunk.shape.size()) std::abort();
  }
  if (EncodePieceMessage(*m) != in) std::abort();
  return 0;
}
