#include "src/checkpoint/checksum_message.h"

#include "src/base/bytes.h"

using shardpoint::internal_base::ByteReader;
using shardpoint::internal_base::ByteWriter;

namespace shardpoint::internal_checkpoint {

std::string EncodeChecksums(const std::vector<uint64_t>& sums,
                            const std::vector<std::vector<uint64_t>>& blocks) {
  ByteWriter w;
  w.U64(sums.size());
  w.Raw(sums.data(), sums.size() * 8);
  w.U64(blocks.size());
  for (const std::vector<uint64_t>& b : blocks) {
    w.U64(b.size());
    w.Raw(b.data(), b.size() * 8);
  }
  return std::move(w.str());
}

Result<std::vector<uint64_t>> DecodeChecksums(std::string_view bytes, size_t expected, int rank,
                                              std::vector<std::vector<uint64_t>>* blocks) {
  ByteReader r(bytes, "checksums from rank " + std::to_string(rank));
  uint64_t n;
  SP_RETURN_IF_ERROR(r.Count(&n, 8));
  if (n != expected) {
    return InternalError("rank " + std::to_string(rank) + " sent " + std::to_string(n) +
                         " checksums, expected " + std::to_string(expected));
  }
  std::vector<uint64_t> sums(n);
  SP_RETURN_IF_ERROR(r.Raw(sums.data(), n * 8));
  SP_RETURN_IF_ERROR(r.Count(&n, 8));
  if (n > expected) {
    return InternalError("rank " + std::to_string(rank) + " sent block checksums of " +
                         std::to_string(n) + " items, expected at most " +
                         std::to_string(expected));
  }
  blocks->resize(n);
  for (std::vector<uint64_t>& b : *blocks) {
    SP_RETURN_IF_ERROR(r.Count(&n, 8));
    b.resize(n);
    SP_RETURN_IF_ERROR(r.Raw(b.data(), n * 8));
  }
  SP_RETURN_IF_ERROR(r.ExpectEnd());
  return sums;
}

}  // namespace shardpoint::internal_checkpoint
