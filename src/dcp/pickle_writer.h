// The smallest pickle writer DCP needs: protocol 2 opcodes for the values
// torch 1.13's DCP pickles (`.metadata`), torch.save's data.pkl of a tensor
// and the plain values of byte items (src/dcp/byte_item_writer.h). The caller emits opcodes in
// order, as a pickler would; no memo is written (every object is emitted once, globals again where
// repeated).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "shardpoint/box.h"
#include "src/base/bytes.h"

namespace shardpoint::internal_dcp {

class PickleWriter {
 public:
  PickleWriter();  // writes PROTO 2

  void Global(std::string_view module, std::string_view name);  // GLOBAL
  void Str(std::string_view s);                                 // BINUNICODE
  void Int(int64_t v);                                          // BININT1/BININT/LONG1
  // LONG1 (LONG4 from 256 bytes) of a little-endian two's complement integer.
  void Long(std::string_view twos_complement_le);
  void Float(double v);            // BINFLOAT
  void Bytes(std::string_view b);  // _codecs.encode(latin-1 str, 'latin1'), as torch.save does
  void Bool(bool v);               // NEWTRUE/NEWFALSE
  void None();
  void Mark();
  void Tuple();                   // TUPLE: the items since the last Mark
  void IntTuple(const Shape& s);  // a tuple of ints
  void EmptyTuple();
  void EmptyDict();
  void EmptyList();
  void SetItems();   // SETITEMS: key/value pairs since the last Mark into the dict below
  void Appends();    // APPENDS: items since the last Mark into the list below
  void NewObj();     // NEWOBJ: cls args -> cls.__new__(cls, *args)
  void Reduce();     // REDUCE: callable args -> callable(*args)
  void Build();      // BUILD: obj state -> obj with state applied
  void BinPersId();  // BINPERSID: the persistent id on the stack

  // Appends STOP and returns the pickle.
  std::string Finish() &&;

 private:
  void U8(uint8_t v) { out_.U8(v); }
  void Append(std::string_view s) { out_.Raw(s.data(), s.size()); }
  internal_base::ByteWriter out_;  // little-endian integers, as pickle's are
};

}  // namespace shardpoint::internal_dcp
