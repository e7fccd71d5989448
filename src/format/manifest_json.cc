// ManifestToJson: a readable rendering of a manifest for the CLI. Key order
// is fixed (nlohmann::ordered_json) so the output is stable.
#include <algorithm>
#include <nlohmann/json.hpp>

#include "src/base/hex.h"
#include "src/format/checksum.h"
#include "src/format/json_depth.h"
#include "src/format/manifest.h"

using shardpoint::internal_base::Hex16;

namespace shardpoint::internal_format {
namespace {

using Json = nlohmann::ordered_json;

constexpr int kMaxMetadataDepth = 128;

Json ChunkToJson(const ChunkRecord& c) {
  Json j;
  j["offset"] = c.box.offset;
  j["shape"] = c.box.shape;
  j["file"] = c.file;
  j["byte_offset"] = c.offset;
  j["nbytes"] = c.nbytes;
  j["checksum"] = Hex16(c.checksum);
  j["block_checksums"] = c.block_sums.size();
  return j;
}

Json TensorToJson(const TensorRecord& t) {
  Json j;
  j["key"] = t.key;
  j["dtype"] = std::string(DTypeName(t.dtype));
  j["shape"] = t.shape;
  Json chunks = Json::array();
  for (const ChunkRecord& c : t.chunks) chunks.push_back(ChunkToJson(c));
  j["chunks"] = std::move(chunks);
  return j;
}

Json ObjectToJson(const ObjectRecord& o) {
  Json j;
  j["key"] = o.key;
  j["index"] = o.index;
  j["grid"] = o.grid;
  j["file"] = o.file;
  j["byte_offset"] = o.offset;
  j["nbytes"] = o.nbytes;
  j["checksum"] = Hex16(o.checksum);
  return j;
}

}  // namespace

std::string ManifestToJson(const Manifest& m, int indent) {
  Json j;
  j["format"] = "shardpoint";
  j["version"] = m.version;
  if (m.version >= 2) j["block_size"] = m.block_size;
  j["files"] = m.files;
  Json tensors = Json::array();
  for (const TensorRecord& t : m.tensors) tensors.push_back(TensorToJson(t));
  j["tensors"] = std::move(tensors);
  Json objects = Json::array();
  for (const ObjectRecord& o : m.objects) objects.push_back(ObjectToJson(o));
  j["objects"] = std::move(objects);
  if (m.has_common) {
    j["common"] = {{"size", m.common.size()},
                   {"checksum", Hex16(Checksum64(m.common.data(), m.common.size()))}};
  } else {
    j["common"] = nullptr;
  }
  if (m.metadata_json.empty()) {
    j["metadata"] = nullptr;
  } else {
    // dump() recurses: deeply nested metadata is shown as its text instead.
    bool too_deep = false;
    Json::parser_callback_t depth_check = [&](int depth, Json::parse_event_t, Json&) {
      too_deep |= depth > kMaxMetadataDepth;
      return true;
    };
    Json md = Json::parse(m.metadata_json, depth_check, /*allow_exceptions=*/false);
    bool as_json = !md.is_discarded() && !too_deep;
    j["metadata"] = as_json ? std::move(md) : Json(m.metadata_json);
  }
  // Keys and metadata may hold invalid UTF-8: replace it rather than throw.
  return j.dump(indent, ' ', /*ensure_ascii=*/false, Json::error_handler_t::replace);
}

Status CheckMetadataJson(const std::string& text) {
  if (text.empty()) return OkStatus();
  // Depth first, on the text, before the parser builds anything that deep.
  if (JsonMaxDepth(text) > kMaxMetadataDepth) {
    return InvalidArgumentError("metadata_json nests deeper than " +
                                std::to_string(kMaxMetadataDepth) + " levels");
  }
  try {
    Json parsed = Json::parse(text);
    (void)parsed;
  } catch (const Json::exception& e) {
    // e.g. "parse error at line 1, column 7: syntax error ...; last read: '{"a'"
    return InvalidArgumentError("metadata_json is not valid JSON: " + std::string(e.what()));
  }
  return OkStatus();
}

}  // namespace shardpoint::internal_format
