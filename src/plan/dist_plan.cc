// Distributed save planning, steps 1-3 (dist_plan.h). Messages:
//
//   share   share_codec.h (a key's name only from its designated holders)
//   reply   u32 'SPR1' | u8 0 | u64 n, n x (u64 chunk, u8 role) | u64 m, m x u8 role
//           u32 'SPR1' | u8 1 | u64 e, e x (u8 phase, u64 rank, u64 index, str key,
//                                             u8 code, str message)
//   names   u64 k, k x (u64 name hash, str name)      (on the error path only)
//   skeleton  u64 t, t x (str key, u8 dtype, ints shape, u64 c, c x (ints offset, ints shape))
//             u64 o, o x (str key, ints index, ints grid, u64 nbytes)
#include "src/plan/dist_plan.h"

#include <xxhash.h>

#include <algorithm>
#include <map>
#include <optional>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "src/base/bytes.h"
#include "src/format/safetensors.h"
#include "src/geometry/flat_range.h"
#include "src/plan/dist_plan_codec.h"
#include "src/plan/key_group.h"
#include "src/plan/share_codec.h"

using shardpoint::internal_base::ByteReader;
using shardpoint::internal_base::ByteWriter;
using shardpoint::internal_format::EncodeDataFileHeader;
using shardpoint::internal_format::kDataDir;
using shardpoint::internal_format::Manifest;
using shardpoint::internal_format::ObjectRecord;
using shardpoint::internal_format::SafetensorsEntry;
using shardpoint::internal_format::TensorRecord;
using shardpoint::internal_geometry::RowMajorIndex;

namespace shardpoint::internal_plan {
namespace {

uint64_t KeyHash(std::string_view key) { return KeyNameHash(key); }

// The region and object indices this rank sends each owner, ascending.
struct ShareIndex {
  std::vector<std::vector<int64_t>> regions, objects;
};

ShareIndex IndexShares(const Contribution& mine, int n) {
  ShareIndex s;
  s.regions.resize(n);
  s.objects.resize(n);
  std::unordered_map<std::string_view, int> owner;
  for (size_t i = 0; i < mine.regions.size(); ++i) {
    const std::string& key = mine.regions[i].key;
    auto [it, fresh] = owner.try_emplace(key, 0);
    if (fresh) it->second = KeyOwner(key, n);
    s.regions[it->second].push_back(static_cast<int64_t>(i));
  }
  for (size_t i = 0; i < mine.objects.size(); ++i) {
    const ObjectDesc& o = mine.objects[i];
    s.objects[ObjectOwner(o.key, o.index, n)].push_back(static_cast<int64_t>(i));
  }
  return s;
}

using Share = ShareContribution;  // names resolved by PlanOwnedKeys

// Removes the regions whose name no share carried (ResolveNames failed).
void DropUnnamed(Share* share) {
  size_t out = 0, u = 0;
  for (size_t i = 0; i < share->c.regions.size(); ++i) {
    const bool unnamed = u < share->unnamed.size() && share->unnamed[u].first == i;
    u += unnamed ? 1 : 0;
    if (unnamed && share->c.regions[i].key.empty()) continue;
    if (out != i) {
      share->c.regions[out] = std::move(share->c.regions[i]);
      share->region_index[out] = share->region_index[i];
    }
    ++out;
  }
  share->c.regions.resize(out);
  share->region_index.resize(out);
  share->unnamed.clear();
}

// The global planner's checks over the owned keys, in its order (phase 0:
// each region in (rank, index) order; 1: tiling by key; 2: objects). The
// first error, and in phase 1 also every unnamed key's (UnnamedKey), since
// its name, once known, may sort first.
std::vector<PlanError> CheckOwned(const std::vector<std::pair<int, Share>>& shares, Manifest* m,
                                  std::vector<Piece>* pieces) {
  std::unordered_map<std::string, KeyGroup> groups;
  for (const auto& [s, share] : shares) {
    const auto& regions = share.c.regions;
    for (size_t j = 0; j < regions.size(); ++j) {
      Status st = AddRegion(regions[j], s, static_cast<int64_t>(j), &groups[regions[j].key]);
      if (!st.ok()) return {PlanError{0, static_cast<uint64_t>(s), share.region_index[j], "", st}};
    }
  }
  std::vector<const std::string*> keys;
  for (const auto& [key, g] : groups) keys.push_back(&key);
  std::sort(keys.begin(), keys.end(), [](auto* a, auto* b) { return *a < *b; });
  std::vector<PlanError> errors;
  bool named_failed = false;
  for (const std::string* key : keys) {
    const bool unnamed = IsUnnamedKey(*key);
    if (named_failed && !unnamed) continue;
    Status st = PlanTensor(*key, groups[*key], m, pieces);
    if (st.ok()) continue;
    errors.push_back(PlanError{1, 0, 0, *key, st});
    named_failed = named_failed || !unnamed;
  }
  if (!errors.empty()) return errors;
  ObjectGroups objects;
  for (const auto& [s, share] : shares) {
    const auto& objs = share.c.objects;
    for (size_t j = 0; j < objs.size(); ++j) {
      Status st = AddObject(objs[j], s, static_cast<int64_t>(j), &objects);
      if (!st.ok()) return {PlanError{2, static_cast<uint64_t>(s), share.object_index[j], "", st}};
    }
  }
  FinishObjects(objects, m, pieces);
  return {};
}

// dist_plan.h's writer choice; the roles go into `roles` (per sender: its
// regions' (chunk, role), then its objects' roles).
void AssignRoles(const std::vector<Piece>& pieces, const Manifest& m,
                 std::unordered_map<int, ReplyRoles>* roles) {
  std::vector<const Piece*> order;
  order.reserve(pieces.size());
  for (const Piece& p : pieces) order.push_back(&p);
  std::stable_sort(order.begin(), order.end(),
                   [](const Piece* a, const Piece* b) { return a->nbytes > b->nbytes; });
  std::unordered_map<int, uint64_t> load;
  for (const Piece* p : order) {
    const size_t k = p->holders.size();
    uint64_t start;
    if (p->is_object) {
      const ObjectRecord& o = m.objects[p->record];
      start = KeyHash(o.key) +
              static_cast<uint64_t>(o.index.empty() ? 0 : RowMajorIndex(o.grid, o.index));
    } else {
      start = KeyHash(m.tensors[p->record].key) + static_cast<uint64_t>(p->chunk);
    }
    const Holder* best = nullptr;
    for (size_t j = 0; j < k; ++j) {
      const Holder& h = p->holders[(start + j) % k];
      if (!best || load[h.rank] < load[best->rank]) best = &h;
    }
    load[best->rank] += p->nbytes;
    const uint8_t write = k > 1 ? kRoleWriteShared : kRoleWrite;  // holders: one per rank
    for (const Holder& h : p->holders) {
      const uint8_t role = &h == best ? write : kRoleReplica;
      ReplyRoles& r = (*roles)[h.rank];
      if (p->is_object) {
        r.objects[h.source] = role;
      } else {
        r.regions[h.source] = {static_cast<uint64_t>(p->chunk), role};
      }
    }
  }
}

}  // namespace

int KeyOwner(std::string_view key, int n) {
  return n <= 1 ? 0 : static_cast<int>(KeyHash(key) % static_cast<uint64_t>(n));
}

int ObjectOwner(std::string_view key, const Shape& index, int n) {
  if (n <= 1) return 0;
  uint64_t h = KeyHash(key);
  for (int64_t i : index) h = h * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(i) + 1;
  return static_cast<int>(h % static_cast<uint64_t>(n));
}

std::vector<std::string> EncodeShares(const Contribution& mine, int n) {
  ShareIndex index = IndexShares(mine, n);
  std::vector<std::string> out(n);
  for (int o = 0; o < n; ++o) {
    if (index.regions[o].empty() && index.objects[o].empty()) continue;
    Contribution sub;
    for (int64_t i : index.regions[o]) sub.regions.push_back(mine.regions[i]);
    for (int64_t i : index.objects[o]) sub.objects.push_back(mine.objects[i]);
    out[o] = EncodeShareContribution(sub, index.regions[o], index.objects[o]);
  }
  return out;
}

Result<OwnerOutcome> PlanOwnedKeys(const std::vector<std::pair<int, std::string_view>>& received) {
  std::vector<std::pair<int, Share>> shares;
  shares.reserve(received.size());
  for (const auto& [s, bytes] : received) {
    if (bytes.empty()) continue;
    SP_ASSIGN_OR_RETURN(Share share, DecodeShareContribution(bytes, s));
    shares.emplace_back(s, std::move(share));
  }
  std::sort(shares.begin(), shares.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  Manifest m;
  std::vector<Piece> pieces;
  OwnerOutcome out;
  std::vector<std::pair<int, ShareContribution*>> bodies;
  for (auto& [s, share] : shares) bodies.emplace_back(s, &share);
  if (std::optional<Status> st = ResolveNames(bodies)) {
    // Two names with one hash: sorted after every region error and before
    // the named keys' tiling. The other keys are still checked.
    PlanError clash{1, 0, 0, "", *st};
    for (auto& [s, share] : shares) DropUnnamed(&share);
    std::vector<PlanError> e = CheckOwned(shares, &m, &pieces);
    out.error_reply = EncodeErrorReply({!e.empty() && e[0] < clash ? e[0] : clash});
    return out;
  }
  if (std::vector<PlanError> e = CheckOwned(shares, &m, &pieces); !e.empty()) {
    out.error_reply = EncodeErrorReply(e);
    return out;
  }
  std::unordered_map<int, ReplyRoles> roles;
  for (const auto& [s, share] : shares) {
    roles[s].regions.assign(share.c.regions.size(), {0, kRoleNone});
    roles[s].objects.assign(share.c.objects.size(), kRoleNone);
  }
  AssignRoles(pieces, m, &roles);
  for (const auto& [s, share] : shares) out.replies.emplace_back(s, EncodeRoleReply(roles[s]));
  out.skeleton = EncodeSkeleton(m);
  return out;
}

namespace {

// One piece this rank writes or holds as a replica.
struct Mine {
  bool is_object;
  bool shared;  // written by this rank, held as replicas by others
  int64_t source;
  uint64_t chunk;
  uint64_t nbytes;
  size_t elem;
  const std::string* key;
  const Shape* index;  // objects
};

bool FileOrder(const Mine& a, const Mine& b) {
  if (a.elem != b.elem) return a.elem > b.elem;
  if (a.is_object != b.is_object) return b.is_object;
  if (*a.key != *b.key) return *a.key < *b.key;
  return a.is_object ? *a.index < *b.index : a.chunk < b.chunk;
}

// The replies' roles, checked against what this rank sent; the first plan
// error (by PlanError order) if any owner sent one.
Status CollectRoles(const Contribution& mine, const Replies& replies, int n,
                    std::vector<Mine>* writes, std::vector<Mine>* replicas) {
  ShareIndex index = IndexShares(mine, n);
  std::optional<PlanError> first;
  std::vector<ReplyRoles> roles(n);
  std::vector<bool> got(n, false);
  for (const auto& [o, bytes] : replies) {
    if (bytes.empty()) continue;
    if (o < 0 || o >= n) return DataLossError("plan reply from rank " + std::to_string(o));
    SP_ASSIGN_OR_RETURN(std::vector<PlanError> errors, DecodeReply(bytes, o, &roles[o]));
    for (PlanError& e : errors) {
      if (!first || e < *first) first = std::move(e);
    }
    got[o] = true;
  }
  if (first) return first->status;
  for (int o = 0; o < n; ++o) {
    if (index.regions[o].empty() && index.objects[o].empty()) continue;
    if (!got[o] || roles[o].regions.size() != index.regions[o].size() ||
        roles[o].objects.size() != index.objects[o].size()) {
      return DataLossError("plan reply from rank " + std::to_string(o) +
                           " does not match what this rank sent it");
    }
    for (size_t j = 0; j < index.regions[o].size(); ++j) {
      const auto [chunk, role] = roles[o].regions[j];
      if (role == kRoleNone) continue;
      const RegionDesc& r = mine.regions[index.regions[o][j]];
      const size_t elem = DTypeSize(r.dtype);
      Mine p{false,
             role == kRoleWriteShared,
             index.regions[o][j],
             chunk,
             static_cast<uint64_t>(r.box.num_elements()) * elem,
             elem,
             &r.key,
             nullptr};
      (WritesPiece(role) ? writes : replicas)->push_back(p);
    }
    for (size_t j = 0; j < index.objects[o].size(); ++j) {
      const uint8_t role = roles[o].objects[j];
      if (role == kRoleNone) continue;
      const ObjectDesc& d = mine.objects[index.objects[o][j]];
      Mine p{true, role == kRoleWriteShared, index.objects[o][j], 0, d.nbytes, 1, &d.key, &d.index};
      (WritesPiece(role) ? writes : replicas)->push_back(p);
    }
  }
  return OkStatus();
}

// LocalPlan's commit split: the items of `writes` (file order) by where
// their records are assembled, the skeleton's tensors to this rank as their
// owner, its objects to rank 0.
Status SplitByOwner(const std::vector<Mine>& writes, std::string_view skeleton, int n, int rank,
                    LocalPlan* lp) {
  SP_ASSIGN_OR_RETURN(Manifest sk, DecodeSkeleton(skeleton, rank));
  Manifest tensors, objects;
  tensors.tensors = std::move(sk.tensors);
  objects.objects = std::move(sk.objects);
  const std::string tensor_skeleton = EncodeSkeleton(tensors);
  const std::string object_skeleton = EncodeSkeleton(objects);
  const std::string no_skeleton = EncodeSkeleton(Manifest());
  std::map<int, StructureWriter> parts;
  if (!tensors.tensors.empty()) parts.try_emplace(rank, tensor_skeleton);
  StructureWriter object_part(object_skeleton);
  lp->item_owner.reserve(writes.size());
  for (size_t i = 0; i < writes.size(); ++i) {
    const Mine& p = writes[i];
    const WriteItem& item = lp->file.items[i];
    if (p.is_object) {
      object_part.Item(true, *p.key, 0, p.index, item.offset, p.nbytes);
      lp->item_owner.push_back(-1);
      continue;
    }
    const int owner = KeyOwner(*p.key, n);
    auto it = parts.try_emplace(owner, owner == rank ? tensor_skeleton : no_skeleton).first;
    it->second.Item(false, *p.key, p.chunk, nullptr, item.offset, p.nbytes);
    lp->item_owner.push_back(owner);
  }
  for (auto& [owner, w] : parts) lp->owner_structures.emplace_back(owner, w.Finish());
  lp->object_structure = object_part.Finish();
  return OkStatus();
}

}  // namespace

Result<LocalPlan> PlanLocal(const Contribution& mine, const Replies& replies, int n,
                            std::string_view skeleton, int rank, bool list_replicas) {
  std::vector<Mine> writes, replicas;
  SP_RETURN_IF_ERROR(CollectRoles(mine, replies, n, &writes, &replicas));
  std::sort(writes.begin(), writes.end(), FileOrder);
  LocalPlan lp;
  RankFile& rf = lp.file;
  StructureWriter structure(skeleton);
  std::vector<SafetensorsEntry> entries;
  uint64_t pos = 0;
  for (const Mine& p : writes) {
    if (p.is_object) {
      ObjectRecord o{*p.key, *p.index, {}, 0, 0, p.nbytes, 0};
      entries.push_back(
          {ObjectEntryName(o), DType::kU8, {static_cast<int64_t>(p.nbytes)}, pos, pos + p.nbytes});
    } else {
      const RegionDesc& r = mine.regions[p.source];
      entries.push_back({ChunkEntryName(*p.key, static_cast<int64_t>(p.chunk)), r.dtype,
                         r.box.shape, pos, pos + p.nbytes});
    }
    rf.items.push_back(
        WriteItem{p.is_object, p.source, -1, static_cast<int64_t>(p.chunk), pos, p.nbytes});
    pos += p.nbytes;
  }
  if (!writes.empty()) {
    rf.file = 0;  // this rank's own file; AssemblePlan numbers the files
    rf.header = EncodeDataFileHeader(entries);
    for (WriteItem& item : rf.items) item.offset += rf.header.size();
    rf.size = rf.header.size() + pos;
  }
  for (size_t i = 0; i < writes.size(); ++i) {
    const Mine& p = writes[i];
    structure.Item(p.is_object, *p.key, p.chunk, p.index, rf.items[i].offset, p.nbytes);
    if (list_replicas && p.shared) lp.shared.push_back(static_cast<uint32_t>(i));
  }
  if (list_replicas) {
    for (const Mine& p : replicas) {
      rf.replicas.push_back(
          WriteItem{p.is_object, p.source, -1, static_cast<int64_t>(p.chunk), 0, p.nbytes});
    }
  }
  lp.path = std::string(kDataDir) + "/" + std::to_string(rank) + ".safetensors";
  lp.structure = structure.Finish();
  SP_RETURN_IF_ERROR(SplitByOwner(writes, skeleton, n, rank, &lp));
  return lp;
}

std::vector<uint64_t> UnnamedInReplies(const std::vector<std::string>& replies) {
  std::vector<uint64_t> out;
  for (const std::string& bytes : replies) {
    if (!IsErrorReply(bytes)) continue;
    ReplyRoles roles;
    Result<std::vector<PlanError>> errors = DecodeReply(bytes, 0, &roles);
    if (!errors.ok()) continue;  // PlanLocal reports a malformed reply
    for (const PlanError& e : *errors) {
      for (uint64_t h : UnnamedKeysIn(e.key)) out.push_back(h);
      for (uint64_t h : UnnamedKeysIn(e.status.message())) out.push_back(h);
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::string NamesHeld(const Contribution& mine, const std::vector<uint64_t>& hashes) {
  std::unordered_map<uint64_t, const std::string*> held;
  for (const RegionDesc& r : mine.regions) {
    const uint64_t h = KeyHash(r.key);
    if (std::binary_search(hashes.begin(), hashes.end(), h)) held.try_emplace(h, &r.key);
  }
  ByteWriter w;
  w.U64(held.size());
  for (const auto& [h, name] : held) w.U64(h), w.Str(*name);
  return std::move(w.str());
}

Status NameErrorReplies(const std::vector<std::string>& held, std::vector<std::string>* replies) {
  std::unordered_map<uint64_t, std::string> names;
  for (size_t r = 0; r < held.size(); ++r) {
    ByteReader in(held[r], "plan names from rank " + std::to_string(r));
    uint64_t k;
    SP_RETURN_IF_ERROR(in.Count(&k, 12));
    for (uint64_t i = 0; i < k; ++i) {
      uint64_t h;
      std::string name;
      SP_RETURN_IF_ERROR(in.U64(&h));
      SP_RETURN_IF_ERROR(in.Str(&name));
      names.try_emplace(h, std::move(name));
    }
    SP_RETURN_IF_ERROR(in.ExpectEnd());
  }
  for (std::string& bytes : *replies) {
    if (!IsErrorReply(bytes)) continue;
    ReplyRoles roles;
    Result<std::vector<PlanError>> errors = DecodeReply(bytes, 0, &roles);
    if (!errors.ok()) continue;  // PlanLocal reports a malformed reply
    for (PlanError& e : *errors) {
      e.key = NameUnnamedKeys(std::move(e.key), names);
      e.status = Status(e.status.code(), NameUnnamedKeys(e.status.message(), names));
    }
    bytes = EncodeErrorReply(*errors);
  }
  return OkStatus();
}

}  // namespace shardpoint::internal_plan
