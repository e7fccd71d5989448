#include "src/dcp/pickle_writer.h"

#include <cstring>

#include "src/dcp/pickle_ops.h"

namespace shardpoint::internal_dcp {

namespace op = pickle_op;

PickleWriter::PickleWriter() {
  U8(op::kProto);
  U8(2);
}

void PickleWriter::Global(std::string_view module, std::string_view name) {
  U8(op::kGlobal);
  Append(module);
  U8('\n');
  Append(name);
  U8('\n');
}

void PickleWriter::Str(std::string_view s) {
  U8(op::kBinUnicode);
  out_.U32(static_cast<uint32_t>(s.size()));
  Append(s);
}

void PickleWriter::Int(int64_t v) {
  if (v >= 0 && v < 256) {
    U8(op::kBinInt1);
    U8(static_cast<uint8_t>(v));
  } else if (v >= INT32_MIN && v <= INT32_MAX) {
    U8(op::kBinInt);
    out_.U32(static_cast<uint32_t>(static_cast<int32_t>(v)));
  } else {
    // LONG1: little-endian two's complement, 8 bytes (always enough).
    U8(op::kLong1);
    U8(8);
    out_.I64(v);
  }
}

void PickleWriter::Long(std::string_view twos_complement_le) {
  if (twos_complement_le.size() < 256) {
    U8(op::kLong1);
    U8(static_cast<uint8_t>(twos_complement_le.size()));
  } else {
    U8(op::kLong4);
    out_.U32(static_cast<uint32_t>(twos_complement_le.size()));
  }
  Append(twos_complement_le);
}

void PickleWriter::Float(double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, 8);
  U8(op::kBinFloat);  // big-endian IEEE 754 double
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

void PickleWriter::Bool(bool v) { U8(v ? op::kNewTrue : op::kNewFalse); }
void PickleWriter::None() { U8(op::kNone); }
void PickleWriter::Mark() { U8(op::kMark); }
void PickleWriter::Tuple() { U8(op::kTuple); }
void PickleWriter::IntTuple(const Shape& s) {
  Mark();
  for (int64_t v : s) Int(v);
  Tuple();
}
void PickleWriter::EmptyTuple() { U8(op::kEmptyTuple); }
void PickleWriter::EmptyDict() { U8(op::kEmptyDict); }
void PickleWriter::EmptyList() { U8(op::kEmptyList); }
void PickleWriter::SetItems() { U8(op::kSetItems); }
void PickleWriter::Appends() { U8(op::kAppends); }
void PickleWriter::NewObj() { U8(op::kNewObj); }
void PickleWriter::Reduce() { U8(op::kReduce); }
void PickleWriter::Build() { U8(op::kBuild); }
void PickleWriter::BinPersId() { U8(op::kBinPersId); }

std::string PickleWriter::Finish() && {
  U8(op::kStop);
  return std::move(out_.str());
}

}  // namespace shardpoint::internal_dcp
