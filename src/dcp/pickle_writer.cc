#include "src/dcp/pickle_writer.h"

namespace shardpoint::internal_dcp {

PickleWriter::PickleWriter() {
  U8(0x80);  // PROTO
  U8(2);
}

void PickleWriter::U32(uint32_t v) {
  for (int i = 0; i < 4; ++i) U8(static_cast<uint8_t>(v >> (8 * i)));
}

void PickleWriter::Global(std::string_view module, std::string_view name) {
  U8('c');
  out_.append(module);
  U8('\n');
  out_.append(name);
  U8('\n');
}

void PickleWriter::Str(std::string_view s) {
  U8('X');
  U32(static_cast<uint32_t>(s.size()));
  out_.append(s);
}

void PickleWriter::Int(int64_t v) {
  if (v >= 0 && v < 256) {
    U8('K');
    U8(static_cast<uint8_t>(v));
  } else if (v >= INT32_MIN && v <= INT32_MAX) {
    U8('J');
    U32(static_cast<uint32_t>(static_cast<int32_t>(v)));
  } else {
    // LONG1: little-endian two's complement, 8 bytes (always enough).
    U8(0x8a);
    U8(8);
    for (int i = 0; i < 8; ++i) U8(static_cast<uint8_t>(static_cast<uint64_t>(v) >> (8 * i)));
  }
}

void PickleWriter::Bool(bool v) { U8(v ? 0x88 : 0x89); }
void PickleWriter::None() { U8('N'); }
void PickleWriter::Mark() { U8('('); }
void PickleWriter::Tuple() { U8('t'); }
void PickleWriter::IntTuple(const Shape& s) {
  Mark();
  for (int64_t v : s) Int(v);
  Tuple();
}
void PickleWriter::EmptyTuple() { U8(')'); }
void PickleWriter::EmptyDict() { U8('}'); }
void PickleWriter::EmptyList() { U8(']'); }
void PickleWriter::SetItems() { U8('u'); }
void PickleWriter::Appends() { U8('e'); }
void PickleWriter::NewObj() { U8(0x81); }
void PickleWriter::Reduce() { U8('R'); }
void PickleWriter::Build() { U8('b'); }
void PickleWriter::BinPersId() { U8('Q'); }

std::string PickleWriter::Finish() && {
  U8('.');
  return std::move(out_);
}

}  // namespace shardpoint::internal_dcp
