// Objects in the field's vocabulary, and composing the states of owners.
#include <map>
#include <string>
#include <utility>

#include "shardpoint/layout_state.h"

namespace shardpoint {

Object ExtraStateObject(std::string key, std::string bytes) {
  return Object{std::move(key), std::move(bytes), {}, {}};
}

Object ShardedObject(std::string key, std::string bytes, Shape index, Shape grid) {
  return Object{std::move(key), std::move(bytes), std::move(index), std::move(grid)};
}

Object RngStateObject(std::string key, std::string bytes, int rank, int world) {
  return Object{std::move(key), std::move(bytes), {rank}, {world}};
}

Object SettingObject(std::string key, std::string value) {
  return Object{std::move(key), std::move(value), {}, {}};
}

bool IsExtraStateKey(std::string_view key) {
  constexpr std::string_view kName = "_extra_state";
  return key == kName || key.ends_with("." + std::string(kName));
}

size_t DropKeys(State* state, const std::function<bool(std::string_view)>& drop) {
  size_t n = std::erase_if(state->objects, [&](const Object& o) { return drop(o.key); });
  n += std::erase_if(state->tensors, [&](const LocalTensor& t) {
    for (const Segment& s : t.segments) {
      if (drop(s.key)) return true;
    }
    return false;
  });
  return n;
}

void AddKeyPrefix(State* state, std::string_view prefix) {
  for (LocalTensor& t : state->tensors) {
    for (Segment& s : t.segments) s.key.insert(0, prefix);
  }
  for (Object& o : state->objects) o.key.insert(0, prefix);
}

Result<State> MergeStates(std::vector<std::pair<std::string, State>> owners, bool prefix_owners) {
  State out;
  std::map<std::string, const std::string*> owner_of;  // key -> owner name
  for (auto& [owner, st] : owners) {
    if (prefix_owners) AddKeyPrefix(&st, owner + ".");
    std::map<std::string, bool> mine;
    for (const LocalTensor& t : st.tensors) {
      for (const Segment& s : t.segments) mine[s.key] = true;
    }
    for (const Object& o : st.objects) mine[o.key] = true;
    for (const auto& [key, unused] : mine) {
      auto [it, fresh] = owner_of.try_emplace(key, &owner);
      if (!fresh) {
        return InvalidArgumentError("key '" + key + "' is held by both '" + *it->second +
                                    "' and '" + owner + "' (prefix the owners to keep both)");
      }
    }
    for (LocalTensor& t : st.tensors) out.tensors.push_back(std::move(t));
    for (Object& o : st.objects) out.objects.push_back(std::move(o));
    if (!out.common && st.common) out.common = std::move(st.common);
    if (out.metadata_json.empty()) out.metadata_json = std::move(st.metadata_json);
  }
  return out;
}

}  // namespace shardpoint
