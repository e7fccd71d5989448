#include "src/checkpoint/piece_message.h"

#include "src/base/bytes.h"

using shardpoint::internal_base::ByteReader;
using shardpoint::internal_base::ByteWriter;

namespace shardpoint::internal_checkpoint {

std::string EncodePieceMessage(const PieceMessage& m) {
  ByteWriter w;
  w.U64(m.private_bytes);
  w.U64(m.pieces.size());
  for (const SharedPiece& p : m.pieces) {
    w.I64(p.piece);
    w.I64(p.tensor);
    w.I64(p.chunk);
    w.Ints(p.in_chunk.offset);
    w.Ints(p.in_chunk.shape);
    w.U8(p.dtype);
    w.U64(p.nbytes);
  }
  return std::move(w.str());
}

Result<PieceMessage> DecodePieceMessage(std::string_view bytes, int rank) {
  const std::string from = "cooperative load pieces of rank " + std::to_string(rank);
  ByteReader r(bytes, from);
  PieceMessage m;
  uint64_t count;
  SP_RETURN_IF_ERROR(r.U64(&m.private_bytes));
  // Per piece at least 3 x i64, two empty Ints (1 byte each), u8, u64.
  SP_RETURN_IF_ERROR(r.Count(&count, 8 * 4 + 3));
  m.pieces.resize(count);
  for (SharedPiece& p : m.pieces) {
    SP_RETURN_IF_ERROR(r.I64(&p.piece));
    SP_RETURN_IF_ERROR(r.I64(&p.tensor));
    SP_RETURN_IF_ERROR(r.I64(&p.chunk));
    SP_RETURN_IF_ERROR(r.Ints(&p.in_chunk.offset));
    SP_RETURN_IF_ERROR(r.Ints(&p.in_chunk.shape));
    SP_RETURN_IF_ERROR(r.U8(&p.dtype));
    SP_RETURN_IF_ERROR(r.U64(&p.nbytes));
    if (p.piece < 0 || p.tensor < 0 || p.chunk < 0 ||
        p.in_chunk.offset.size() != p.in_chunk.shape.size()) {
      return DataLossError(from + ": piece " + std::to_string(&p - m.pieces.data()) +
                           " is malformed (negative index, or offset and shape of different "
                           "ranks) before byte " +
                           std::to_string(r.pos()));
    }
  }
  SP_RETURN_IF_ERROR(r.ExpectEnd());
  return m;
}

}  // namespace shardpoint::internal_checkpoint
