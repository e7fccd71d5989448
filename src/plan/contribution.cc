// The compact binary form of a rank's contribution, exchanged before the
// global save plan. Keys are interned: regions of one key, dtype and global
// shape (flat shards give up to 2*ndim-1 per tensor) refer to one entry.
//
//   u32 magic 'SPC2' | u64 nkeys | nkeys x (str key, u8 dtype, ints shape)
//   u64 nregions | nregions x (var key index, ndim x var offset, ndim x var shape)
//   u64 nobjects | nobjects x (str key, ints index, ints grid, u64 nbytes)
//
// var: a LEB128 varint (varint.h); ndim: the rank of the key's global shape.
// A region takes ~10 bytes, not 52: each key's owner receives a share of
// every rank holding the key, 4,096 ranks' at 65,536 (plan_scale_sampled).
#include <algorithm>
#include <unordered_map>

#include "src/base/bytes.h"
#include "src/plan/save_plan.h"
#include "src/plan/varint.h"

using shardpoint::internal_base::ByteReader;
using shardpoint::internal_base::ByteWriter;

namespace shardpoint::internal_plan {
namespace {
constexpr uint32_t kMagic = 0x32435053;  // "SPC2"
}

std::string EncodeContribution(const Contribution& c) {
  ByteWriter w;
  w.U32(kMagic);
  // One entry per (key, dtype, global shape): a rank whose regions of one key
  // disagree sends each variant, so the planner names the disagreement.
  std::unordered_map<std::string_view, std::vector<uint32_t>> ids;
  std::vector<const RegionDesc*> firsts;
  std::vector<uint32_t> id_of(c.regions.size());
  for (size_t i = 0; i < c.regions.size(); ++i) {
    const RegionDesc& r = c.regions[i];
    std::vector<uint32_t>& cands = ids[r.key];
    auto same = std::find_if(cands.begin(), cands.end(), [&](uint32_t id) {
      return firsts[id]->dtype == r.dtype && firsts[id]->global_shape == r.global_shape;
    });
    if (same != cands.end()) {
      id_of[i] = *same;
      continue;
    }
    id_of[i] = static_cast<uint32_t>(firsts.size());
    cands.push_back(id_of[i]);
    firsts.push_back(&r);
  }
  w.U64(firsts.size());
  for (const RegionDesc* r : firsts) {
    w.Str(r->key);
    w.U8(static_cast<uint8_t>(r->dtype));
    w.Ints(r->global_shape);
  }
  w.U64(c.regions.size());
  for (size_t i = 0; i < c.regions.size(); ++i) {
    const RegionDesc& r = c.regions[i];
    PutVarint(w, id_of[i]);
    for (int64_t x : r.box.offset) PutVarint(w, static_cast<uint64_t>(x));
    for (int64_t x : r.box.shape) PutVarint(w, static_cast<uint64_t>(x));
  }
  w.U64(c.objects.size());
  for (const ObjectDesc& o : c.objects) {
    w.Str(o.key);
    w.Ints(o.index);
    w.Ints(o.grid);
    w.U64(o.nbytes);
  }
  return std::move(w.str());
}

Result<Contribution> DecodeContribution(std::string_view bytes, int rank) {
  ByteReader in(bytes, "plan exchange from rank " + std::to_string(rank));
  uint32_t magic;
  SP_RETURN_IF_ERROR(in.U32(&magic));
  if (magic != kMagic) {
    return DataLossError("plan exchange from rank " + std::to_string(rank) + ": bad magic");
  }
  uint64_t nkeys;
  SP_RETURN_IF_ERROR(in.Count(&nkeys, 6));
  std::vector<RegionDesc> keys(nkeys);
  for (RegionDesc& k : keys) {
    uint8_t dtype;
    SP_RETURN_IF_ERROR(in.Str(&k.key));
    SP_RETURN_IF_ERROR(in.U8(&dtype));
    if (!IsValidDType(dtype)) return DataLossError("plan exchange: bad dtype for '" + k.key + "'");
    k.dtype = static_cast<DType>(dtype);
    SP_RETURN_IF_ERROR(in.Ints(&k.global_shape));
  }
  Contribution c;
  uint64_t nregions;
  SP_RETURN_IF_ERROR(in.Count(&nregions, 1));
  c.regions.resize(nregions);
  for (RegionDesc& r : c.regions) {
    uint64_t id;
    SP_RETURN_IF_ERROR(GetVarint(in, &id));
    if (id >= nkeys) return DataLossError("plan exchange: key index out of range");
    r.key = keys[id].key;
    r.dtype = keys[id].dtype;
    r.global_shape = keys[id].global_shape;
    const size_t ndim = r.global_shape.size();
    r.box.offset.resize(ndim);
    r.box.shape.resize(ndim);
    for (int64_t& x : r.box.offset) SP_RETURN_IF_ERROR(GetVarint(in, &x));
    for (int64_t& x : r.box.shape) SP_RETURN_IF_ERROR(GetVarint(in, &x));
  }
  uint64_t nobjects;
  SP_RETURN_IF_ERROR(in.Count(&nobjects, 14));
  c.objects.resize(nobjects);
  for (ObjectDesc& o : c.objects) {
    SP_RETURN_IF_ERROR(in.Str(&o.key));
    SP_RETURN_IF_ERROR(in.Ints(&o.index));
    SP_RETURN_IF_ERROR(in.Ints(&o.grid));
    SP_RETURN_IF_ERROR(in.U64(&o.nbytes));
  }
  SP_RETURN_IF_ERROR(in.ExpectEnd());
  return c;
}

}  // namespace shardpoint::internal_plan
