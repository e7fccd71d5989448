// The one little-endian binary codec: every encoding shardpoint writes
// (manifest, plan exchange, cooperative pieces, checksum exchange, AllToAll,
// HF header blob, the safetensors header length, the DCP zip and pickle
// writers) goes through ByteWriter and is read back by ByteReader.
//
// Layout of the composite items (byte-identical to what earlier releases
// wrote; the fuzz corpora replay them):
//   Str    u32 length, then the bytes
//   Blob   u64 length, then the bytes
//   Ints   u8 rank (<= kMaxRank), then rank x i64
//   Dims   rank x i64, the rank known to the caller
//   Count  u64, checked against the bytes left before anyone allocates
//
// The writer cannot fail on numbers; a Str longer than kMaxStrBytes or an
// Ints longer than kMaxRank is not written and sets status() (sticky, first
// error wins), which callers encoding outside input check. The reader never
// reads past its input and returns a DataLoss status naming `what` and the
// byte position. Plain values over borrowed memory; not thread-safe.
// Little-endian hosts only (checked in bytes.cc).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "shardpoint/status.h"
#include "src/base/limits.h"

namespace shardpoint::internal_base {

class ByteWriter {
 public:
  void U8(uint8_t v) { Raw(&v, 1); }
  void U16(uint16_t v) { Raw(&v, 2); }
  void U32(uint32_t v) { Raw(&v, 4); }
  void U64(uint64_t v) { Raw(&v, 8); }
  void I64(int64_t v) { Raw(&v, 8); }
  void Str(std::string_view s);
  void Blob(std::string_view s) {
    U64(s.size());
    Raw(s.data(), s.size());
  }
  void Ints(const std::vector<int64_t>& v);
  void Dims(const std::vector<int64_t>& v) { Raw(v.data(), v.size() * 8); }
  void Raw(const void* p, size_t n) {
    if (n) out_.append(static_cast<const char*>(p), n);
  }
  void Reserve(size_t n) { out_.reserve(n); }

  // OK unless a Str or Ints was too long to encode (then it was skipped).
  const Status& status() const { return status_; }
  std::string& str() { return out_; }

 private:
  std::string out_;
  Status status_;
};

class ByteReader {
 public:
  // `what` names the input in errors ("plan exchange from rank 3").
  ByteReader(std::string_view in, std::string what) : in_(in), what_(std::move(what)) {}
  Status U8(uint8_t* v) { return Raw(v, 1); }
  Status U16(uint16_t* v) { return Raw(v, 2); }
  Status U32(uint32_t* v) { return Raw(v, 4); }
  Status U64(uint64_t* v) { return Raw(v, 8); }
  Status I64(int64_t* v) { return Raw(v, 8); }
  // Any integer, by its size.
  template <typename T>
  Status Int(T* v) {
    static_assert(std::is_integral_v<T>);
    return Raw(v, sizeof(T));
  }
  Status Str(std::string* s);
  // Str's bytes as a view into the input (valid while the input is).
  Status StrView(std::string_view* s);
  Status Blob(std::string* s);
  // Blob's bytes as a view into the input.
  Status BlobView(std::string_view* s);
  Status Ints(std::vector<int64_t>* v);
  Status Dims(size_t rank, std::vector<int64_t>* v);
  // A count whose items take at least min_item_bytes (> 0) each: checked
  // against the remaining input before anyone allocates for it.
  Status Count(uint64_t* n, size_t min_item_bytes);
  // Inline: every fixed-size field of every decoder comes through here.
  Status Raw(void* p, size_t n) {
    if (left() < n) [[unlikely]] {
      std::memset(p, 0, n);  // written on every path (no maybe-uninitialized at callers)
      return Truncated(n);
    }
    if (n) std::memcpy(p, in_.data() + pos_, n);
    pos_ += n;
    return OkStatus();
  }
  // DataLoss unless every byte was read.
  Status ExpectEnd() const;

  bool done() const { return pos_ == in_.size(); }
  size_t pos() const { return pos_; }
  size_t left() const { return in_.size() - pos_; }

 private:
  Status Truncated(size_t need) const;
  // The next `n` bytes as a view into the input.
  Status View(uint64_t n, std::string_view* s);
  std::string_view in_;
  size_t pos_ = 0;
  std::string what_;
};

}  // namespace shardpoint::internal_base
