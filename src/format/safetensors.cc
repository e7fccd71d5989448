#include "src/format/safetensors.h"

#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>
#include <unordered_set>

#include "src/base/bytes.h"
#include "src/base/checked.h"
#include "src/format/json_depth.h"

using shardpoint::internal_base::ByteReader;
using shardpoint::internal_base::ByteWriter;
using shardpoint::internal_base::CheckedMul;

namespace shardpoint::internal_format {
namespace {

using Json = nlohmann::json;

constexpr char kMetadataKey[] = "__metadata__";
// A valid header nests 3 deep ({name: {shape: [..]}}); anything far deeper is
// rejected before the JSON parser sees it.
constexpr int kMaxJsonDepth = 16;

void AppendJsonString(std::string_view s, std::string* out) {
  static constexpr char kHex[] = "0123456789abcdef";
  out->push_back('"');
  for (char c : s) {
    unsigned char u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out->push_back('\\');
      out->push_back(c);
    } else if (u < 0x20) {
      out->append("\\u00");
      out->push_back(kHex[u >> 4]);
      out->push_back(kHex[u & 15]);
    } else {
      out->push_back(c);
    }
  }
  out->push_back('"');
}

std::string Prefix(const std::string& file) { return "safetensors file '" + file + "': "; }

std::string Range(uint64_t begin, uint64_t end) {
  return "[" + std::to_string(begin) + ", " + std::to_string(end) + ")";
}

bool IsUnsigned(const Json& j, uint64_t max, uint64_t* out) {
  if (!j.is_number_unsigned()) return false;
  uint64_t v = j.get<uint64_t>();
  if (v > max) return false;
  *out = v;
  return true;
}

// Validates one tensor entry (everything but coverage).
Status DecodeEntry(const std::string& name, const Json& j, uint64_t data_size,
                   const std::string& file, SafetensorsEntry* e) {
  std::string where = Prefix(file) + "tensor '" + name + "': ";
  if (!j.is_object()) return DataLossError(where + "entry is not a JSON object");
  e->name = name;

  auto dtype_it = j.find("dtype");
  if (dtype_it == j.end() || !dtype_it->is_string()) {
    return DataLossError(where + "missing or non-string \"dtype\"");
  }
  const std::string& dtype_name = dtype_it->get_ref<const std::string&>();
  Result<DType> dtype = ParseDType(dtype_name);
  // ParseDType also takes lower-case aliases; files hold only the canonical names.
  if (!dtype.ok() || DTypeName(*dtype) != dtype_name) {
    return DataLossError(where + "unknown dtype '" + dtype_name + "'");
  }
  e->dtype = *dtype;

  auto shape_it = j.find("shape");
  if (shape_it == j.end() || !shape_it->is_array()) {
    return DataLossError(where + "missing or non-array \"shape\"");
  }
  e->shape.clear();
  e->shape.reserve(shape_it->size());
  for (const Json& d : *shape_it) {
    uint64_t v;
    if (!IsUnsigned(d, std::numeric_limits<int64_t>::max(), &v)) {
      return DataLossError(where + "shape element " + d.dump() + " is not a non-negative int64");
    }
    e->shape.push_back(static_cast<int64_t>(v));
  }
  Result<int64_t> numel = CheckedNumElements(e->shape);
  const std::optional<uint64_t> bytes =
      numel.ok() ? CheckedMul<uint64_t>(*numel, DTypeSize(e->dtype)) : std::nullopt;
  if (!bytes) {
    return DataLossError(where + "byte size of shape " + ShapeToString(e->shape) + " overflows");
  }
  const uint64_t nbytes = *bytes;

  auto off_it = j.find("data_offsets");
  if (off_it == j.end() || !off_it->is_array() || off_it->size() != 2 ||
      !IsUnsigned((*off_it)[0], std::numeric_limits<uint64_t>::max(), &e->begin) ||
      !IsUnsigned((*off_it)[1], std::numeric_limits<uint64_t>::max(), &e->end)) {
    return DataLossError(where + "\"data_offsets\" must be [begin, end] of unsigned integers");
  }
  if (e->begin > e->end) {
    return DataLossError(where + "data_offsets " + Range(e->begin, e->end) + " has begin > end");
  }
  if (e->end > data_size) {
    return DataLossError(where + "data_offsets " + Range(e->begin, e->end) +
                         " out of bounds of the data region " + Range(0, data_size));
  }
  if (e->end - e->begin != nbytes) {
    return DataLossError(where + "data_offsets " + Range(e->begin, e->end) + " hold " +
                         std::to_string(e->end - e->begin) + " bytes, but " +
                         std::string(DTypeName(e->dtype)) + " " + ShapeToString(e->shape) +
                         " needs " + std::to_string(nbytes));
  }
  return OkStatus();
}

Status DecodeMetadata(const Json& j, const std::string& file,
                      std::map<std::string, std::string>* out) {
  if (!j.is_object()) {
    return DataLossError(Prefix(file) + "\"__metadata__\" is not a JSON object");
  }
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (!it.value().is_string()) {
      return DataLossError(Prefix(file) + "\"__metadata__\" value of '" + it.key() +
                           "' is not a string");
    }
    (*out)[it.key()] = it.value().get<std::string>();
  }
  return OkStatus();
}

// Entries sorted by (begin, end) must tile [0, data_size) exactly.
Status CheckCoverage(const std::vector<SafetensorsEntry>& entries, uint64_t data_size,
                     const std::string& file) {
  uint64_t pos = 0;
  const SafetensorsEntry* prev = nullptr;
  for (const SafetensorsEntry& e : entries) {
    if (e.begin < pos) {
      return DataLossError(Prefix(file) + "tensor '" + e.name + "' bytes " + Range(e.begin, e.end) +
                           " overlap tensor '" + prev->name + "' bytes " +
                           Range(prev->begin, prev->end));
    }
    if (e.begin > pos) {
      return DataLossError(Prefix(file) + "data region bytes " + Range(pos, e.begin) +
                           " are not covered by any tensor (hole before tensor '" + e.name + "')");
    }
    pos = e.end;
    prev = &e;
  }
  if (pos != data_size) {
    return DataLossError(Prefix(file) + "data region bytes " + Range(pos, data_size) +
                         " are not covered by any tensor");
  }
  return OkStatus();
}

// JSON's whitespace (RFC 8259): what may follow the header's object.
bool IsJsonSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// The header text is `{...}` followed only by JSON whitespace.
Status CheckHeaderText(std::string_view json, const std::string& file) {
  if (json.size() >= 3 && json.substr(0, 3) == "\xEF\xBB\xBF") {
    return DataLossError(Prefix(file) +
                         "header starts with a UTF-8 byte-order mark (bytes [8, 11))");
  }
  if (json.empty() || json[0] != '{') {
    return DataLossError(Prefix(file) + "header does not start with '{' (byte 8)");
  }
  const size_t nul = json.find('\0');
  if (nul != std::string_view::npos) {
    return DataLossError(Prefix(file) + "header holds a NUL byte at byte " +
                         std::to_string(8 + nul));
  }
  size_t end = json.size();
  while (end > 0 && IsJsonSpace(json[end - 1])) --end;
  if (json[end - 1] != '}') {
    return DataLossError(
        Prefix(file) + "header has bytes other than JSON whitespace after its JSON object (byte " +
        std::to_string(8 + end - 1) + " is not '}', space, tab, CR or LF)");
  }
  return OkStatus();
}

}  // namespace

std::string EncodeSafetensorsHeader(const std::vector<SafetensorsEntry>& entries,
                                    const std::map<std::string, std::string>& metadata,
                                    size_t align) {
  std::string json = "{";
  bool first = true;
  auto comma = [&] {
    if (!first) json.push_back(',');
    first = false;
  };
  if (!metadata.empty()) {
    comma();
    AppendJsonString(kMetadataKey, &json);
    json += ":{";
    bool first_md = true;
    for (const auto& [k, v] : metadata) {
      if (!first_md) json.push_back(',');
      first_md = false;
      AppendJsonString(k, &json);
      json.push_back(':');
      AppendJsonString(v, &json);
    }
    json.push_back('}');
  }
  for (const SafetensorsEntry& e : entries) {
    comma();
    AppendJsonString(e.name, &json);
    json += ":{\"dtype\":\"";
    json += DTypeName(e.dtype);
    json += "\",\"shape\":[";
    for (size_t i = 0; i < e.shape.size(); ++i) {
      if (i) json.push_back(',');
      json += std::to_string(e.shape[i]);
    }
    json += "],\"data_offsets\":[" + std::to_string(e.begin) + "," + std::to_string(e.end) + "]}";
  }
  json.push_back('}');

  if (align == 0) align = 1;
  size_t total = 8 + json.size();
  json.append((align - total % align) % align, ' ');
  ByteWriter out;
  out.Reserve(8 + json.size());
  out.U64(json.size());
  out.Raw(json.data(), json.size());
  return std::move(out.str());
}

std::string EncodeDataFileHeader(const std::vector<SafetensorsEntry>& entries) {
  return EncodeSafetensorsHeader(entries, {{"format", "shardpoint"}, {"version", "1"}}, 4096);
}

Result<uint64_t> DecodeSafetensorsHeaderLength(std::string_view first8, uint64_t file_size,
                                               const std::string& file) {
  if (first8.size() < 8 || file_size < 8) {
    return DataLossError(Prefix(file) +
                         "truncated: the 8-byte header length is missing (file size " +
                         std::to_string(file_size) + ")");
  }
  uint64_t n = 0;
  ByteReader length(first8.substr(0, 8), file);
  SP_RETURN_IF_ERROR(length.U64(&n));  // 8 bytes are there
  if (n > kMaxSafetensorsHeader) {
    return DataLossError(Prefix(file) + "header length " + std::to_string(n) +
                         " exceeds the limit " + std::to_string(kMaxSafetensorsHeader));
  }
  if (n > file_size - 8) {
    return DataLossError(Prefix(file) + "header length " + std::to_string(n) +
                         " exceeds the file size " + std::to_string(file_size) + " (header bytes " +
                         Range(8, 8 + n) + ")");
  }
  return n;
}

Result<SafetensorsHeader> DecodeSafetensorsHeader(std::string_view json, uint64_t file_size,
                                                  const std::string& file) {
  SafetensorsHeader header;
  // Stage 1: sizes.
  if (json.size() > kMaxSafetensorsHeader || file_size < 8 || json.size() > file_size - 8) {
    return DataLossError(Prefix(file) + "header length " + std::to_string(json.size()) +
                         " does not fit the file size " + std::to_string(file_size));
  }
  header.data_start = 8 + json.size();
  const uint64_t data_size = file_size - header.data_start;

  // Stage 2: parse (no exceptions; duplicate top-level names detected on the way).
  if (JsonMaxDepth(json) > kMaxJsonDepth) {
    return DataLossError(Prefix(file) + "header JSON nests deeper than " +
                         std::to_string(kMaxJsonDepth) + " (bytes " + Range(8, header.data_start) +
                         ")");
  }
  std::unordered_set<std::string> seen;
  std::string duplicate;
  Json::parser_callback_t on_event = [&](int depth, Json::parse_event_t event, Json& parsed) {
    if (depth == 1 && event == Json::parse_event_t::key && duplicate.empty()) {
      const std::string& k = parsed.get_ref<const std::string&>();
      if (!seen.insert(k).second) duplicate = k;
    }
    return true;
  };
  Json root = Json::parse(json.begin(), json.end(), on_event, /*allow_exceptions=*/false);
  if (root.is_discarded()) {
    return DataLossError(Prefix(file) + "header is not valid JSON (bytes " +
                         Range(8, header.data_start) + ")");
  }
  if (!root.is_object()) {
    return DataLossError(Prefix(file) + "header JSON is not an object (bytes " +
                         Range(8, header.data_start) + ")");
  }
  if (!duplicate.empty()) {
    return DataLossError(Prefix(file) + "duplicate name '" + duplicate + "' in header");
  }
  // The text must be that object and nothing else but trailing JSON
  // whitespace (space, tab, CR, LF), as the reference implementation demands
  // (its serde_json parse takes trailing whitespace; its test
  // whitespace_padded_header reads `{}` + CR, space, tab, LF): no byte-order
  // mark (which the parser skips), no leading whitespace (the format says the
  // header starts with '{'), and no NUL (where the parser stops, ignoring the
  // rest).
  SP_RETURN_IF_ERROR(CheckHeaderText(json, file));

  // Stage 3: semantics of each entry.
  header.entries.reserve(root.size());
  for (auto it = root.begin(); it != root.end(); ++it) {
    if (it.key() == kMetadataKey) {
      SP_RETURN_IF_ERROR(DecodeMetadata(it.value(), file, &header.metadata));
      continue;
    }
    SafetensorsEntry e;
    SP_RETURN_IF_ERROR(DecodeEntry(it.key(), it.value(), data_size, file, &e));
    header.entries.push_back(std::move(e));
  }

  // Stage 4: exact coverage of the data region.
  std::sort(header.entries.begin(), header.entries.end(),
            [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
              if (a.begin != b.begin) return a.begin < b.begin;
              if (a.end != b.end) return a.end < b.end;
              return a.name < b.name;
            });
  SP_RETURN_IF_ERROR(CheckCoverage(header.entries, data_size, file));
  header.file_size = file_size;
  return header;
}

uint64_t AssignSafetensorsOffsets(std::vector<SafetensorsEntry>* entries) {
  uint64_t pos = 0;
  for (SafetensorsEntry& e : *entries) {
    uint64_t n = 1;
    for (int64_t d : e.shape) n *= static_cast<uint64_t>(d);
    e.begin = pos;
    e.end = pos + n * DTypeSize(e.dtype);
    pos = e.end;
  }
  return pos;
}

}  // namespace shardpoint::internal_format
