#include "src/plan/share_codec.h"

#include <xxhash.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <unordered_map>

#include "src/base/bytes.h"
#include "src/plan/tiling.h"
#include "src/plan/varint.h"

using shardpoint::internal_base::ByteReader;
using shardpoint::internal_base::ByteWriter;

namespace shardpoint::internal_plan {
namespace {

constexpr uint32_t kMagic = 0x33535053;  // "SPS3"
// UnnamedKey's form: a control character no sane key starts with.
constexpr std::string_view kUnnamed = "\x1fname hash ", kUnnamedEnd = "\x1f";

struct Entry {
  const RegionDesc* first;
  bool named;
};

// One entry per (key, dtype, global shape), as contribution.cc interns them.
std::vector<Entry> InternKeys(const Contribution& c, std::vector<uint32_t>* id_of) {
  std::unordered_map<std::string_view, std::vector<uint32_t>> ids;
  std::vector<Entry> entries;
  id_of->resize(c.regions.size());
  for (size_t i = 0; i < c.regions.size(); ++i) {
    const RegionDesc& r = c.regions[i];
    std::vector<uint32_t>& cands = ids[r.key];
    auto same = std::find_if(cands.begin(), cands.end(), [&](uint32_t id) {
      const RegionDesc& f = *entries[id].first;
      return f.dtype == r.dtype && f.global_shape == r.global_shape;
    });
    uint32_t id = same != cands.end() ? *same : static_cast<uint32_t>(entries.size());
    if (same == cands.end()) {
      cands.push_back(id);
      entries.push_back({&r, false});
    }
    (*id_of)[i] = id;
    if (NamesKey(r)) entries[id].named = true;
  }
  return entries;
}

Status GetCount(ByteReader& in, uint64_t* n, size_t min_item_bytes, const std::string& what) {
  SP_RETURN_IF_ERROR(GetVarint(in, n));
  if (*n > in.left() / min_item_bytes) {
    return DataLossError(what + ": count " + std::to_string(*n) + " at byte " +
                         std::to_string(in.pos()) + " exceeds the bytes left");
  }
  return OkStatus();
}

Status GetU32(ByteReader& in, uint64_t* v) {
  uint32_t x;
  SP_RETURN_IF_ERROR(in.U32(&x));
  *v = x;
  return OkStatus();
}

std::string HashText(uint64_t h) {
  char buf[19];
  std::snprintf(buf, sizeof buf, "0x%016llx", static_cast<unsigned long long>(h));
  return buf;
}

}  // namespace

uint64_t KeyNameHash(std::string_view key) { return XXH3_64bits(key.data(), key.size()); }

bool NamesKey(const RegionDesc& r) {
  if (r.box.empty()) return true;
  if (std::all_of(r.box.offset.begin(), r.box.offset.end(), [](int64_t x) { return x == 0; })) {
    return true;
  }
  return !ValidateBoxInShape(r.box, r.global_shape).ok();
}

std::string EncodeShareContribution(const Contribution& c, const std::vector<int64_t>& region_index,
                                    const std::vector<int64_t>& object_index) {
  std::vector<uint32_t> id_of;
  std::vector<Entry> entries = InternKeys(c, &id_of);
  ByteWriter w;
  w.U32(kMagic);
  PutVarint(w, entries.size());
  for (const Entry& e : entries) {
    w.U8(e.named ? 1 : 0);
    if (e.named) {
      w.Str(e.first->key);
    } else {
      w.U64(KeyNameHash(e.first->key));
    }
    w.U8(static_cast<uint8_t>(e.first->dtype));
    w.U8(static_cast<uint8_t>(e.first->global_shape.size()));  // <= kMaxRank: checked upstream
    for (int64_t x : e.first->global_shape) PutVarint(w, static_cast<uint64_t>(x));
  }
  PutVarint(w, c.regions.size());
  for (size_t i = 0; i < c.regions.size(); ++i) {
    const RegionDesc& r = c.regions[i];
    PutVarint(w, id_of[i]);
    for (int64_t x : r.box.offset) PutVarint(w, static_cast<uint64_t>(x));
    for (int64_t x : r.box.shape) PutVarint(w, static_cast<uint64_t>(x));
    w.U32(static_cast<uint32_t>(region_index[i]));  // a rank holds < 2^32 regions
  }
  PutVarint(w, c.objects.size());
  for (size_t i = 0; i < c.objects.size(); ++i) {
    const ObjectDesc& o = c.objects[i];
    w.Str(o.key);
    w.Ints(o.index);
    w.Ints(o.grid);
    w.U64(o.nbytes);
    w.U32(static_cast<uint32_t>(object_index[i]));
  }
  return std::move(w.str());
}

Result<ShareContribution> DecodeShareContribution(std::string_view bytes, int rank) {
  const std::string what = "plan share from rank " + std::to_string(rank);
  ByteReader in(bytes, what);
  uint32_t magic;
  SP_RETURN_IF_ERROR(in.U32(&magic));
  if (magic != kMagic) return DataLossError(what + ": bad magic");
  uint64_t nkeys;
  SP_RETURN_IF_ERROR(GetCount(in, &nkeys, 4, what));
  std::vector<RegionDesc> keys(nkeys);
  std::vector<std::optional<uint64_t>> hashes(nkeys);
  for (size_t k = 0; k < nkeys; ++k) {
    uint8_t named, dtype, ndim;
    SP_RETURN_IF_ERROR(in.U8(&named));
    if (named > 1) return DataLossError(what + ": bad key entry " + std::to_string(k));
    if (named == 1) {
      SP_RETURN_IF_ERROR(in.Str(&keys[k].key));
    } else {
      uint64_t h;
      SP_RETURN_IF_ERROR(in.U64(&h));
      hashes[k] = h;
    }
    SP_RETURN_IF_ERROR(in.U8(&dtype));
    if (!IsValidDType(dtype))
      return DataLossError(what + ": bad dtype in key entry " + std::to_string(k));
    keys[k].dtype = static_cast<DType>(dtype);
    SP_RETURN_IF_ERROR(in.U8(&ndim));
    if (ndim > internal_base::kMaxRank)
      return DataLossError(what + ": bad rank in key entry " + std::to_string(k));
    keys[k].global_shape.resize(ndim);
    for (int64_t& x : keys[k].global_shape) SP_RETURN_IF_ERROR(GetVarint(in, &x));
  }
  ShareContribution s;
  uint64_t nregions;
  SP_RETURN_IF_ERROR(GetCount(in, &nregions, 5, what));
  s.c.regions.resize(nregions);
  s.region_index.resize(nregions);
  for (size_t i = 0; i < nregions; ++i) {
    RegionDesc& r = s.c.regions[i];
    uint64_t id;
    SP_RETURN_IF_ERROR(GetVarint(in, &id));
    if (id >= nkeys) return DataLossError(what + ": key index out of range");
    r.key = keys[id].key;
    r.dtype = keys[id].dtype;
    r.global_shape = keys[id].global_shape;
    if (hashes[id]) s.unnamed.emplace_back(static_cast<uint32_t>(i), *hashes[id]);
    const size_t ndim = r.global_shape.size();
    r.box.offset.resize(ndim);
    r.box.shape.resize(ndim);
    for (int64_t& x : r.box.offset) SP_RETURN_IF_ERROR(GetVarint(in, &x));
    for (int64_t& x : r.box.shape) SP_RETURN_IF_ERROR(GetVarint(in, &x));
    SP_RETURN_IF_ERROR(GetU32(in, &s.region_index[i]));
  }
  uint64_t nobjects;
  SP_RETURN_IF_ERROR(GetCount(in, &nobjects, 18, what));
  s.c.objects.resize(nobjects);
  s.object_index.resize(nobjects);
  for (size_t i = 0; i < nobjects; ++i) {
    ObjectDesc& o = s.c.objects[i];
    SP_RETURN_IF_ERROR(in.Str(&o.key));
    SP_RETURN_IF_ERROR(in.Ints(&o.index));
    SP_RETURN_IF_ERROR(in.Ints(&o.grid));
    SP_RETURN_IF_ERROR(in.U64(&o.nbytes));
    SP_RETURN_IF_ERROR(GetU32(in, &s.object_index[i]));
  }
  SP_RETURN_IF_ERROR(in.ExpectEnd());
  return s;
}

std::optional<Status> ResolveNames(const std::vector<std::pair<int, ShareContribution*>>& shares) {
  std::unordered_map<uint64_t, const std::string*> names;
  std::map<uint64_t, std::pair<std::string, std::string>> clashes;
  for (const auto& [rank, s] : shares) {
    size_t u = 0;
    for (size_t i = 0; i < s->c.regions.size(); ++i) {
      if (u < s->unnamed.size() && s->unnamed[u].first == i) {
        ++u;
        continue;
      }
      const std::string& key = s->c.regions[i].key;
      auto [it, fresh] = names.try_emplace(KeyNameHash(key), &key);
      if (!fresh && *it->second != key) clashes[it->first] = std::minmax(*it->second, key);
    }
  }
  for (const auto& [rank, s] : shares) {
    for (const auto& [i, h] : s->unnamed) {
      if (auto c = clashes.find(h); c != clashes.end()) {
        return InvalidArgumentError("tensors '" + c->second.first + "' and '" + c->second.second +
                                    "' have the same name hash " + HashText(h) + ": rename one");
      }
      auto it = names.find(h);
      s->c.regions[i].key = it != names.end() ? *it->second : UnnamedKey(h);
    }
  }
  return std::nullopt;
}

std::string UnnamedKey(uint64_t hash) {
  return std::string(kUnnamed) + HashText(hash) + std::string(kUnnamedEnd);
}

bool IsUnnamedKey(std::string_view key) { return key.substr(0, kUnnamed.size()) == kUnnamed; }

std::vector<uint64_t> UnnamedKeysIn(std::string_view text) {
  std::vector<uint64_t> out;
  for (size_t at = text.find(kUnnamed); at != std::string_view::npos;
       at = text.find(kUnnamed, at + 1)) {
    const std::string_view hex = text.substr(at + kUnnamed.size(), 18);
    if (hex.size() < 18 || text.substr(at + kUnnamed.size() + 18, 1) != kUnnamedEnd) continue;
    out.push_back(std::strtoull(std::string(hex).c_str(), nullptr, 16));
  }
  return out;
}

std::string NameUnnamedKeys(std::string text,
                            const std::unordered_map<uint64_t, std::string>& names) {
  for (const auto& [h, name] : names) {
    const std::string placeholder = UnnamedKey(h);
    for (size_t at = text.find(placeholder); at != std::string::npos;
         at = text.find(placeholder, at + name.size())) {
      text.replace(at, placeholder.size(), name);
    }
  }
  return text;
}

}  // namespace shardpoint::internal_plan
