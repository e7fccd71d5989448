// Little-endian byte writer and bounds-checked reader for compact binary
// encodings (the plan exchange). The reader never reads past its input and
// never allocates from an unchecked count.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "shardpoint/box.h"
#include "shardpoint/status.h"

namespace shardpoint::internal {

class ByteWriter {
 public:
  void U8(uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void U32(uint32_t v) { Raw(&v, 4); }
  void U64(uint64_t v) { Raw(&v, 8); }
  void I64(int64_t v) { Raw(&v, 8); }
  void Str(std::string_view s) {
    U32(static_cast<uint32_t>(s.size()));
    out_.append(s);
  }
  void Ints(const Shape& s) {
    U8(static_cast<uint8_t>(s.size()));
    Raw(s.data(), s.size() * 8);
  }
  void Raw(const void* p, size_t n) { out_.append(static_cast<const char*>(p), n); }
  std::string& str() { return out_; }

 private:
  std::string out_;  // little-endian hosts only (checked in bytes.cc)
};

class ByteReader {
 public:
  ByteReader(std::string_view in, std::string what) : in_(in), what_(std::move(what)) {}
  Status U8(uint8_t* v) { return Raw(v, 1); }
  Status U32(uint32_t* v) { return Raw(v, 4); }
  Status U64(uint64_t* v) { return Raw(v, 8); }
  Status I64(int64_t* v) { return Raw(v, 8); }
  Status Str(std::string* s);
  // A shape of at most kMaxRank dims.
  Status Ints(Shape* s);
  // A count whose items take at least min_item_bytes each: checked against
  // the remaining input before anyone allocates for it.
  Status Count(uint64_t* n, size_t min_item_bytes);
  Status Raw(void* p, size_t n);
  bool done() const { return pos_ == in_.size(); }
  size_t pos() const { return pos_; }

 private:
  Status Truncated(size_t need) const;
  std::string_view in_;
  size_t pos_ = 0;
  std::string what_;
};

inline constexpr size_t kMaxRank = 32;

}  // namespace shardpoint::internal
