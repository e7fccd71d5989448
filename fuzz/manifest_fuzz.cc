// libFuzzer target for DecodeManifest (and ManifestToJson / EncodeManifest on
// whatever decodes). Built by fuzz/CMakeLists.txt; see fuzz/README.md.
//
// Most random inputs die at the trailing checksum; the target therefore also
// re-seals each input (recomputes the checksum) so the structure checks are
// exercised too.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "src/format/checksum.h"
#include "src/format/manifest.h"

using shardpoint::internal_format::DecodeManifest;
using shardpoint::internal_format::EncodeManifest;
using shardpoint::internal_format::Manifest;
using shardpoint::internal_format::ManifestToJson;

namespace {

void DecodeOne(const std::string& bytes) {
  shardpoint::Result<Manifest> r = DecodeManifest(bytes, "fuzz");
  if (!r.ok()) {
    if (r.status().code() != shardpoint::StatusCode::kDataLoss) std::abort();
    return;
  }
  if (EncodeManifest(*r) != bytes) std::abort();  // decode and encode are inverses
  (void)ManifestToJson(*r);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string bytes(reinterpret_cast<const char*>(data), size);
  DecodeOne(bytes);
  if (bytes.size() >= 16) {
    std::memcpy(bytes.data(), "SHRDPNT\0\1\0\0\0", 12);  // magic and version 1
    bytes.append(8, '\0');
    uint64_t sum = shardpoint::internal_format::Checksum64(bytes.data(), bytes.size() - 8);
    std::memcpy(bytes.data() + bytes.size() - 8, &sum, 8);
    DecodeOne(bytes);
  }
  return 0;
}
