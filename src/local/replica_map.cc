#include "src/local/replica_map.h"

namespace shardpoint::internal_local {
namespace {

constexpr char kHeader[] = "shardpoint-local-replicas 1";

std::vector<std::string> SplitTabs(std::string_view line) {
  std::vector<std::string> out;
  size_t at = 0;
  while (true) {
    const size_t tab = line.find('\t', at);
    out.emplace_back(line.substr(at, tab == std::string_view::npos ? line.npos : tab - at));
    if (tab == std::string_view::npos) return out;
    at = tab + 1;
  }
}

}  // namespace

std::string EncodeReplicaMap(const ReplicaMap& map) {
  std::string out = std::string(kHeader) + "\n";
  for (const auto& [file, nodes] : map.files) {
    out += file;
    for (const std::string& n : nodes) out += "\t" + n;
    out += "\n";
  }
  return out;
}

Result<ReplicaMap> DecodeReplicaMap(std::string_view text, const std::string& name) {
  ReplicaMap map;
  size_t at = 0;
  int line_no = 0;
  while (at < text.size()) {
    const size_t nl = text.find('\n', at);
    if (nl == std::string_view::npos) {
      return DataLossError("'" + name + "': line " + std::to_string(line_no + 1) +
                           " has no newline (truncated)");
    }
    const std::string_view line = text.substr(at, nl - at);
    at = nl + 1;
    if (line_no++ == 0) {
      if (line != kHeader) {
        return DataLossError("'" + name + "': not a replica map (first line '" +
                             std::string(line.substr(0, 64)) + "')");
      }
      continue;
    }
    std::vector<std::string> fields = SplitTabs(line);
    if (fields.size() < 2) {
      return DataLossError("'" + name + "': line " + std::to_string(line_no) +
                           " names no node for its file");
    }
    for (const std::string& f : fields) {
      if (f.empty()) {
        return DataLossError("'" + name + "': line " + std::to_string(line_no) +
                             " has an empty field");
      }
    }
    std::string file = std::move(fields[0]);
    fields.erase(fields.begin());
    map.files.emplace_back(std::move(file), std::move(fields));
  }
  if (line_no == 0) return DataLossError("'" + name + "': empty");
  return map;
}

}  // namespace shardpoint::internal_local
