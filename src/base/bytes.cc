#include "src/base/bytes.h"

#include <bit>

namespace shardpoint::internal {

static_assert(std::endian::native == std::endian::little,
              "shardpoint encodes little-endian by memcpy; big-endian hosts are not supported");

Status ByteReader::Truncated(size_t need) const {
  return DataLossError(what_ + ": truncated at byte " + std::to_string(pos_) + " (need " +
                       std::to_string(need) + " more, " + std::to_string(in_.size() - pos_) +
                       " left)");
}

Status ByteReader::Raw(void* p, size_t n) {
  if (in_.size() - pos_ < n) return Truncated(n);
  if (n) std::memcpy(p, in_.data() + pos_, n);
  pos_ += n;
  return OkStatus();
}

Status ByteReader::Str(std::string* s) {
  uint32_t n;
  SP_RETURN_IF_ERROR(U32(&n));
  if (in_.size() - pos_ < n) return Truncated(n);
  s->assign(in_.data() + pos_, n);
  pos_ += n;
  return OkStatus();
}

Status ByteReader::Ints(Shape* s) {
  uint8_t rank;
  SP_RETURN_IF_ERROR(U8(&rank));
  if (rank > kMaxRank) {
    return DataLossError(what_ + ": rank " + std::to_string(rank) + " at byte " +
                         std::to_string(pos_ - 1) + " exceeds " + std::to_string(kMaxRank));
  }
  s->resize(rank);
  return Raw(s->data(), size_t{rank} * 8);
}

Status ByteReader::Count(uint64_t* n, size_t min_item_bytes) {
  SP_RETURN_IF_ERROR(U64(n));
  size_t left = in_.size() - pos_;
  if (min_item_bytes > 0 && *n > left / min_item_bytes) {
    return DataLossError(what_ + ": count " + std::to_string(*n) + " at byte " +
                         std::to_string(pos_ - 8) + " exceeds the " + std::to_string(left) +
                         " bytes left");
  }
  return OkStatus();
}

}  // namespace shardpoint::internal
