// libFuzzer target for the save's checksum message (what every rank sends
// rank 0 after writing its data file; src/checkpoint/checksum_message.h).
// The first input byte is the number of checksums rank 0 expects; the rest is
// the message. Whatever decodes must re-encode to exactly the same bytes (the
// format has one encoding and the decoder refuses trailing bytes); anything
// else must be a typed error, never a crash or an allocation the input's size
// does not justify.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "src/checkpoint/checksum_message.h"

using shardpoint::internal_checkpoint::DecodeChecksums;
using shardpoint::internal_checkpoint::EncodeChecksums;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t expected = data[0];
  std::string_view in(reinterpret_cast<const char*>(data) + 1, size - 1);
  std::vector<std::vector<uint64_t>> blocks;
  shardpoint::Result<std::vector<uint64_t>> sums = DecodeChecksums(in, expected, 3, &blocks);
  if (!sums.ok()) {
    if (sums.status().message().empty()) std::abort();
    return 0;
  }
  if (sums->size() != expected || blocks.size() > expected) std::abort();
  if (EncodeChecksums(*sums, blocks) != in) std::abort();
  return 0;
}
