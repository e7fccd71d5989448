// libFuzzer target for the safetensors header decoders. Built by
// fuzz/CMakeLists.txt; see fuzz/README.md.
//
// The input is a whole file image: 8-byte length, JSON header, data region.
// Whatever decodes is re-encoded and decoded again; the entries must survive.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "src/format/safetensors.h"

using shardpoint::internal_format::DecodeSafetensorsHeader;
using shardpoint::internal_format::DecodeSafetensorsHeaderLength;
using shardpoint::internal_format::EncodeSafetensorsHeader;
using shardpoint::internal_format::SafetensorsEntry;
using shardpoint::internal_format::SafetensorsHeader;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view file(reinterpret_cast<const char*>(data), size);
  shardpoint::Result<uint64_t> n = DecodeSafetensorsHeaderLength(file.substr(0, 8), size, "fuzz");
  if (!n.ok()) return 0;
  shardpoint::Result<SafetensorsHeader> h =
      DecodeSafetensorsHeader(file.substr(8, *n), size, "fuzz");
  if (!h.ok()) {
    if (h.status().code() != shardpoint::StatusCode::kDataLoss) std::abort();
    return 0;
  }
  uint64_t data_size = size - h->data_start;
  std::string again = EncodeSafetensorsHeader(h->entries, h->metadata, 8);
  uint64_t start = again.size();
  again.append(data_size, '\0');
  shardpoint::Result<SafetensorsHeader> h2 =
      DecodeSafetensorsHeader(std::string_view(again).substr(8, start - 8), again.size(), "fuzz");
  if (!h2.ok() || h2->entries.size() != h->entries.size() || h2->metadata != h->metadata) {
    std::abort();
  }
  for (size_t i = 0; i < h->entries.size(); ++i) {
    const SafetensorsEntry& a = h->entries[i];
    const SafetensorsEntry& b = h2->entries[i];
    if (a.name != b.name || a.dtype != b.dtype || a.shape != b.shape || a.begin != b.begin ||
        a.end != b.end) {
      std::abort();
    }
  }
  return 0;
}
