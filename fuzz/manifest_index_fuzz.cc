// libFuzzer target for DecodeIndex, the index of a sharded manifest (format
// versions 3 to 6), whole and as a loading rank decodes it (IndexKeep), and
// the shard choice a loading rank makes from it.
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

// A loading rank's decode keeping every other key (and one that is not
// there): the same verdict as the whole decode, entries equal to its own,
// numbered as in it, and every third key owned.
void CheckPartial(const std::string& bytes, const shardpoint::Result<fmt::ManifestIndex>& whole) {
  std::vector<std::string> keys;
  for (size_t i = 0; whole.ok() && i < whole->tensors.size(); i += 2) {
    keys.push_back(whole->tensors[i].key);
  }
  keys.push_back("\xff\xff not a key");
  const fmt::IndexKeep keep{&keys, 3, 1};
  shardpoint::Result<fmt::ManifestIndex> p = fmt::DecodeIndex(bytes, "fuzz", &keep);
  if (p.ok() != whole.ok()) std::abort();
  if (!p.ok()) {
    if (p.status().ToString() != whole.status().ToString()) std::abort();
    return;
  }
  if (!p->partial || p->tensor_count != whole->tensors.size()) std::abort();
  if (p->tensors.size() != (whole->tensors.size() + 1) / 2) std::abort();
  for (size_t j = 0; j < p->tensors.size(); ++j) {
    const fmt::TensorEntry& a = p->tensors[j];
    const fmt::TensorEntry& b = whole->tensors[2 * j];
    if (p->tensor_numbers[j] != 2 * j || a.key != b.key || a.dtype != b.dtype ||
        a.shape != b.shape || a.spans != b.spans || a.parts.size() != b.parts.size()) {
      std::abort();
    }
  }
  for (size_t j = 0; j < p->owned_keys.size(); ++j) {
    const uint64_t i = 3 * j + 1;
    if (p->owned_keys[j].first != i || p->owned_keys[j].second != whole->tensors[i].key) {
      std::abort();
    }
  }
  if (p->owned_keys.size() != (whole->tensors.size() + 1) / 3) std::abort();
}

void DecodeOne(const std::string& bytes) {
  shardpoint::Result<fmt::ManifestIndex> r = fmt::DecodeIndex(bytes, "fuzz");
  CheckPartial(bytes, r);
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
  // Every shard in a named file, at most its file's bytes so far.
  std::vector<uint64_t> end(r->shard_files.size(), 0);
  for (const fmt::ShardRef& s : r->shards) {
    if (s.file >= end.size() || s.offset != end[s.file]) std::abort();
    end[s.file] += s.nbytes;
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
