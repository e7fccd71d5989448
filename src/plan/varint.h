// LEB128 varints for the planning messages (contribution, shares): box
// offsets, shapes and indices are small non-negative numbers; a negative one
// (malformed input) takes 10 bytes and decodes to itself.
#pragma once

#include <cstdint>

#include "shardpoint/status.h"
#include "src/base/bytes.h"

namespace shardpoint::internal_plan {

inline void PutVarint(internal_base::ByteWriter& w, uint64_t v) {
  while (v >= 0x80) {
    w.U8(static_cast<uint8_t>(v | 0x80));
    v >>= 7;
  }
  w.U8(static_cast<uint8_t>(v));
}

inline Status GetVarint(internal_base::ByteReader& in, uint64_t* v) {
  *v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    uint8_t b;
    SP_RETURN_IF_ERROR(in.U8(&b));
    *v |= static_cast<uint64_t>(b & 0x7f) << shift;
    if (!(b & 0x80)) return OkStatus();
  }
  return DataLossError("plan message: a varint longer than 10 bytes at byte " +
                       std::to_string(in.pos()));
}

inline Status GetVarint(internal_base::ByteReader& in, int64_t* v) {
  uint64_t u;
  SP_RETURN_IF_ERROR(GetVarint(in, &u));
  *v = static_cast<int64_t>(u);
  return OkStatus();
}

}  // namespace shardpoint::internal_plan
