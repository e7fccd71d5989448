// libFuzzer target for DecodeIndex, the index of a sharded manifest (format
// versions 3 to 5), and the shard choice a loading rank makes from it.
// Built by fuzz/CMakeLists.txt; see fuzz/README.md.
//
// As in manifest_fuzz.cc, each input is also re-sealed (its trailing
// checksum recomputed) so that the structure checks run.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "src/format/checksum.h"
#include "src/format/manifest_index.h"

namespace fmt = shardpoint::internal_format;

namespace {

void DecodeOne(const std::string& bytes) {
  shardpoint::Result<fmt::ManifestIndex> r = fmt::DecodeIndex(bytes, "fuzz");
  if (!r.ok()) {
    if (r.status().code() != shardpoint::StatusCode::kDataLoss) std::abort();
    return;
  }
  if (fmt::EncodeIndex(*r) != bytes) std::abort();  // decode and encode are inverses
  if (r->num_objects() > fmt::kMaxIndexObjects) std::abort();
  // Every key's shards: each one in range.
  std::vector<std::string> tensors;
  for (const fmt::TensorEntry& t : r->tensors) tensors.push_back(t.key);
  for (uint32_t s : fmt::ShardsForKeys(*r, tensors, fmt::ObjectKeys(*r))) {
    if (s >= r->shards.size()) std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string bytes(reinterpret_cast<const char*>(data), size);
  DecodeOne(bytes);
  if (bytes.size() >= 16) {
    bytes.append(8, '\0');
    uint64_t sum = fmt::Checksum64(bytes.data(), bytes.size() - 8);
    std::memcpy(bytes.data() + bytes.size() - 8, &sum, 8);
    DecodeOne(bytes);
  }
  return 0;
}
