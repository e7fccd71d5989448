#include "src/base/bytes.h"

#include <bit>

namespace shardpoint::internal_base {

static_assert(std::endian::native == std::endian::little,
              "shardpoint encodes little-endian by memcpy; big-endian hosts are not supported");

void ByteWriter::Str(std::string_view s) {
  if (s.size() > kMaxStrBytes) {
    if (status_.ok()) {
      status_ = InvalidArgumentError("a string of " + std::to_string(s.size()) +
                                     " bytes exceeds the encodable " +
                                     std::to_string(kMaxStrBytes) + " (32-bit length)");
    }
    return;
  }
  U32(static_cast<uint32_t>(s.size()));
  Raw(s.data(), s.size());
}

void ByteWriter::Ints(const std::vector<int64_t>& v) {
  if (v.size() > kMaxRank) {
    if (status_.ok()) {
      status_ = InvalidArgumentError("a shape of rank " + std::to_string(v.size()) +
                                     " exceeds the largest rank " + std::to_string(kMaxRank));
    }
    return;
  }
  U8(static_cast<uint8_t>(v.size()));
  Dims(v);
}

Status ByteReader::Truncated(size_t need) const {
  return DataLossError(what_ + ": truncated at byte " + std::to_string(pos_) + " (need " +
                       std::to_string(need) + " more, " + std::to_string(left()) + " left)");
}

Status ByteReader::View(uint64_t n, std::string_view* s) {
  if (left() < n) {
    return DataLossError(what_ + ": length " + std::to_string(n) + " at byte " +
                         std::to_string(pos_) + " exceeds the " + std::to_string(left()) +
                         " bytes left");
  }
  *s = in_.substr(pos_, static_cast<size_t>(n));
  pos_ += static_cast<size_t>(n);
  return OkStatus();
}

Status ByteReader::Str(std::string* s) {
  std::string_view v;
  SP_RETURN_IF_ERROR(StrView(&v));
  s->assign(v);
  return OkStatus();
}

Status ByteReader::StrView(std::string_view* s) {
  uint32_t n;
  SP_RETURN_IF_ERROR(U32(&n));
  return View(n, s);
}

Status ByteReader::Blob(std::string* s) {
  std::string_view v;
  SP_RETURN_IF_ERROR(BlobView(&v));
  s->assign(v);
  return OkStatus();
}

Status ByteReader::BlobView(std::string_view* s) {
  uint64_t n;
  SP_RETURN_IF_ERROR(U64(&n));
  return View(n, s);
}

Status ByteReader::Ints(std::vector<int64_t>* v) {
  uint8_t rank;
  SP_RETURN_IF_ERROR(U8(&rank));
  if (rank > kMaxRank) {
    return DataLossError(what_ + ": rank " + std::to_string(rank) + " at byte " +
                         std::to_string(pos_ - 1) + " exceeds " + std::to_string(kMaxRank));
  }
  return Dims(rank, v);
}

Status ByteReader::Dims(size_t rank, std::vector<int64_t>* v) {
  if (left() / 8 < rank) return Truncated(rank * 8);
  v->resize(rank);
  return Raw(v->data(), rank * 8);
}

Status ByteReader::Count(uint64_t* n, size_t min_item_bytes) {
  SP_RETURN_IF_ERROR(U64(n));
  const size_t per = min_item_bytes > 0 ? min_item_bytes : 1;
  if (*n > left() / per) {
    return DataLossError(what_ + ": count " + std::to_string(*n) + " at byte " +
                         std::to_string(pos_ - 8) + " exceeds the " + std::to_string(left()) +
                         " bytes left");
  }
  return OkStatus();
}

Status ByteReader::ExpectEnd() const {
  if (done()) return OkStatus();
  return DataLossError(what_ + ": " + std::to_string(left()) + " unexpected bytes at byte " +
                       std::to_string(pos_));
}

}  // namespace shardpoint::internal_base
