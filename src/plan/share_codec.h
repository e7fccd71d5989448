// The regions and objects of a plan share (dist_plan.cc): each key's owner
// receives a share from every holder of the key, so a key's name (often 80+
// bytes) is sent once per share only by its designated holders, NamesKey: a
// rule each holder evaluates alone. The others send the name's XXH3-64
// (KeyNameHash, the hash KeyOwner routes by) with the key's dtype and shape,
// and the owner takes the name from a designated holder (ResolveNames), so
// it checks every holder's dtype and shape and names the key and both ranks
// exactly as the global planner does.
//
//   u32 'SPS3' | var nkeys | nkeys x key
//   key     u8 1, str name, u8 dtype, u8 ndim, ndim x var   (designated)
//           u8 0, u64 name hash, u8 dtype, u8 ndim, ndim x var
//   var n | n x (var key index, ndim x var offset, ndim x var shape,
//                u32 the region's index on the sender)
//   var m | m x (str key, ints index, ints grid, u64 nbytes, u32 its index)
//
// var: a LEB128 varint (varint.h); the indices are fixed-width, so a share's
// size does not depend on where the region lies in its sender's list (the
// bench generates owners' inboxes key by key). A share whose key its sender
// does not name takes about 30 bytes, not 170: an owner receives one from
// each of a key's holders (4,096 at 65,536 ranks).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "src/plan/save_plan.h"

namespace shardpoint::internal_plan {

uint64_t KeyNameHash(std::string_view key);

// A holder names the key where one of its regions of it starts at the
// origin, is empty, or lies outside its global shape. If no holder of a key
// does, its non-empty boxes all miss the origin element: the plan fails.
bool NamesKey(const RegionDesc& r);

// `c`: what the sender sends one owner; the indices: each region's and
// object's index in the sender's whole contribution.
std::string EncodeShareContribution(const Contribution& c, const std::vector<int64_t>& region_index,
                                    const std::vector<int64_t>& object_index);

struct ShareContribution {
  Contribution c;                                      // regions of unnamed keys have an empty key
  std::vector<std::pair<uint32_t, uint64_t>> unnamed;  // (region, name hash), ascending
  std::vector<uint64_t> region_index, object_index;
};
// DataLoss naming the sending rank where malformed.
Result<ShareContribution> DecodeShareContribution(std::string_view bytes, int rank);

// Fills the unnamed regions' keys from the names the shares (sender rank,
// share) carry, or, for a hash no share names, with UnnamedKey(hash): such a
// key has no box at its origin, so its tiling check fails, and the error
// names the placeholder until the holders' names replace it (dist_plan.h,
// NameErrorReplies). A hash two names share is returned as the
// InvalidArgument status to report; nullopt otherwise.
std::optional<Status> ResolveNames(const std::vector<std::pair<int, ShareContribution*>>& shares);

// A placeholder for the name of the key with this name hash.
std::string UnnamedKey(uint64_t hash);
bool IsUnnamedKey(std::string_view key);
// The hashes of the placeholders in `text`, in order.
std::vector<uint64_t> UnnamedKeysIn(std::string_view text);
// `text` with every placeholder whose hash `names` holds replaced by the name.
std::string NameUnnamedKeys(std::string text,
                            const std::unordered_map<uint64_t, std::string>& names);

}  // namespace shardpoint::internal_plan
