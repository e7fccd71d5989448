#include "src/dcp/pickle_writer.h"

#include <cstring>

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

void PickleWriter::Long(std::string_view twos_complement_le) {
  if (twos_complement_le.size() < 256) {
    U8(0x8a);  // LONG1
    U8(static_cast<uint8_t>(twos_complement_le.size()));
  } else {
    U8(0x8b);  // LONG4
    U32(static_cast<uint32_t>(twos_complement_le.size()));
  }
  out_.append(twos_complement_le);
}

void PickleWriter::Float(double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, 8);
  U8('G');  // BINFLOAT: big-endian IEEE 754 double
  for (int i = 7; i >= 0; --i) U8(static_cast<uint8_t>(bits >> (8 * i)));
}

void PickleWriter::Bytes(std::string_view b) {
  // Protocol 2 has no bytes opcode: torch.save (protocol 2) pickles bytes as
  // _codecs.encode(s, 'latin1') of the str whose code points are the bytes.
  std::string latin1;
  latin1.reserve(b.size());
  for (unsigned char c : b) {
    if (c < 0x80) {
      latin1.push_back(static_cast<char>(c));
    } else {
      latin1.push_back(static_cast<char>(0xC0 | (c >> 6)));
      latin1.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    }
  }
  Global("_codecs", "encode");
  Mark();
  Str(latin1);
  Str("latin1");
  Tuple();
  Reduce();
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
