// The pickle opcodes shardpoint reads (pickle.cc) and writes
// (pickle_writer.cc), named as Python's pickletools names them (kBinUnicode
// is BINUNICODE). Only the binary opcodes of protocols 2 to 5 that DCP's
// pickles use are listed; the reader refuses every other byte.
#pragma once

#include <cstdint>

namespace shardpoint::internal_dcp::pickle_op {

// Framing.
inline constexpr uint8_t kProto = 0x80;  // u8 protocol version
inline constexpr uint8_t kFrame = 0x95;  // u64 frame length (a hint only)
inline constexpr uint8_t kStop = '.';

// The stack.
inline constexpr uint8_t kMark = '(';
inline constexpr uint8_t kPop = '0';
inline constexpr uint8_t kPopMark = '1';
inline constexpr uint8_t kDup = '2';

// Constants.
inline constexpr uint8_t kNone = 'N';
inline constexpr uint8_t kNewTrue = 0x88;
inline constexpr uint8_t kNewFalse = 0x89;
inline constexpr uint8_t kBinInt = 'J';   // i32
inline constexpr uint8_t kBinInt1 = 'K';  // u8
inline constexpr uint8_t kBinInt2 = 'M';  // u16
inline constexpr uint8_t kLong1 = 0x8a;   // u8 n, then n bytes of two's complement
inline constexpr uint8_t kLong4 =
    0x8b;  // u32 n, then n bytes (written only: the reader refuses it)
inline constexpr uint8_t kBinFloat = 'G';          // big-endian f64
inline constexpr uint8_t kBinUnicode = 'X';        // u32 length, UTF-8
inline constexpr uint8_t kShortBinUnicode = 0x8c;  // u8 length
inline constexpr uint8_t kBinUnicode8 = 0x8d;      // u64 length
inline constexpr uint8_t kBinBytes = 'B';          // u32 length
inline constexpr uint8_t kShortBinBytes = 'C';     // u8 length
inline constexpr uint8_t kBinBytes8 = 0x8e;        // u64 length

// Containers.
inline constexpr uint8_t kEmptyTuple = ')';
inline constexpr uint8_t kTuple = 't';  // the values since the last MARK
inline constexpr uint8_t kTuple1 = 0x85;
inline constexpr uint8_t kTuple2 = 0x86;
inline constexpr uint8_t kTuple3 = 0x87;
inline constexpr uint8_t kEmptyList = ']';
inline constexpr uint8_t kList = 'l';
inline constexpr uint8_t kAppend = 'a';
inline constexpr uint8_t kAppends = 'e';
inline constexpr uint8_t kEmptyDict = '}';
inline constexpr uint8_t kDict = 'd';
inline constexpr uint8_t kSetItem = 's';
inline constexpr uint8_t kSetItems = 'u';

// The memo.
inline constexpr uint8_t kBinPut = 'q';      // u8 index
inline constexpr uint8_t kLongBinPut = 'r';  // u32 index
inline constexpr uint8_t kMemoize = 0x94;    // the next index
inline constexpr uint8_t kBinGet = 'h';      // u8 index
inline constexpr uint8_t kLongBinGet = 'j';  // u32 index

// Objects.
inline constexpr uint8_t kGlobal = 'c';  // "module\nname\n"
inline constexpr uint8_t kStackGlobal = 0x93;
inline constexpr uint8_t kReduce = 'R';
inline constexpr uint8_t kNewObj = 0x81;
inline constexpr uint8_t kBuild = 'b';
inline constexpr uint8_t kBinPersId = 'Q';

}  // namespace shardpoint::internal_dcp::pickle_op
