// PlaceInHf (shardpoint/hf_placement.h): export-hf's plan of pieces, for a
// caller that loads a checkpoint into a model named the HF way.
#include <map>

#include "shardpoint/hf_placement.h"
#include "src/base/guard.h"
#include "src/format/manifest.h"
#include "src/io/resources.h"
#include "src/source/mapped_source.h"

using shardpoint::internal_base::Guarded;
using shardpoint::internal_format::TensorRecord;
using shardpoint::internal_hf::HfMeta;
using shardpoint::internal_hf::HfPiece;
using shardpoint::internal_hf::MapKeysToHf;
using shardpoint::internal_hf::MappedKey;
using shardpoint::internal_hf::ResolveVars;
using shardpoint::internal_hf::Vars;
using shardpoint::internal_io::CallResources;
using shardpoint::internal_source::MappedSource;
using shardpoint::internal_source::OpenSource;

namespace shardpoint {

namespace {

constexpr char kStatePrefix[] = "optimizer.state.";

// (state name, key) of optimizer.state.<name>.<key>; ("", key) otherwise.
std::pair<std::string, std::string> SplitState(const std::string& key) {
  const size_t n = sizeof(kStatePrefix) - 1;
  if (key.compare(0, n, kStatePrefix) != 0) return {"", key};
  const size_t dot = key.find('.', n);
  if (dot == std::string::npos || dot == n || dot + 1 == key.size()) return {"", key};
  return {key.substr(n, dot - n), key.substr(dot + 1)};
}

Result<std::vector<HfPlacement>> Place(const std::string& dir, const HfMapping& mapping,
                                       const HfOptions& options, CallResources& res) {
  SP_ASSIGN_OR_RETURN(MappedSource src, OpenSource(res.storage(), dir, mapping, options.variables));
  SP_ASSIGN_OR_RETURN(Vars vars,
                      ResolveVars(mapping, src.config_json, options.variables, src.source_vars));
  std::map<std::string, HfMeta> bases;  // the keys to map: model keys, states' keys
  std::vector<std::pair<std::string, std::string>> split;
  for (const TensorRecord& t : src.index.tensors) {
    split.push_back(SplitState(t.key));
    bases.emplace(split.back().second, HfMeta{split.back().second, t.dtype, t.shape});
  }
  std::vector<HfMeta> keys;
  for (auto& [name, meta] : bases) keys.push_back(meta);
  SP_ASSIGN_OR_RETURN(std::vector<MappedKey> mapped, MapKeysToHf(mapping, keys, vars));
  std::map<std::string, const MappedKey*> by_key;
  for (const MappedKey& mk : mapped) by_key[mk.info.key] = &mk;
  std::vector<HfPlacement> out;
  for (size_t i = 0; i < split.size(); ++i) {
    auto it = by_key.find(split[i].second);
    if (it == by_key.end()) continue;
    const MappedKey& mk = *it->second;
    if (bases[split[i].second].shape != src.index.tensors[i].shape) {
      return InvalidArgumentError("'" + src.index.tensors[i].key + "' " +
                                  ShapeToString(src.index.tensors[i].shape) + ": not the shape " +
                                  ShapeToString(bases[split[i].second].shape) + " of '" +
                                  split[i].second + "'");
    }
    std::map<std::string, Shape> hf_shape;
    for (const HfMeta& h : mk.hf_tensors) hf_shape[h.name] = h.shape;
    for (const HfPiece& p : mk.pieces) {
      out.push_back(
          {src.index.tensors[i].key, split[i].first, p.hf, hf_shape[p.hf], p.hf_offset, p.box});
    }
  }
  return out;
}

}  // namespace

Result<std::vector<HfPlacement>> PlaceInHf(const std::string& dir, const HfMapping& mapping,
                                           const HfOptions& options) {
  CallResources res(options);
  return Guarded("HF placement", [&] { return Place(dir, mapping, options, res); });
}

}  // namespace shardpoint
