// The messages of distributed save planning (dist_plan.h): an owner's reply
// (roles, or a plan error), its skeleton for rank 0, and each rank's
// structure message to rank 0. Encoded with src/base/bytes.h; decoding
// returns DataLoss naming the sending rank.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "src/base/bytes.h"
#include "src/format/manifest.h"

namespace shardpoint::internal_plan {

// What a sender does with a region or object it sent an owner.
inline constexpr uint8_t kRoleNone = 0;     // a declaration or a duplicate on the same rank
inline constexpr uint8_t kRoleWrite = 1;    // writes the chunk
inline constexpr uint8_t kRoleReplica = 2;  // holds a replica another rank writes
// Writes the chunk, of which other ranks hold replicas (their checksums meet
// the writer's at the key's owner: src/checkpoint/replica_owners.h).
inline constexpr uint8_t kRoleWriteShared = 3;
inline bool WritesPiece(uint8_t role) { return role == kRoleWrite || role == kRoleWriteShared; }

struct ReplyRoles {
  std::vector<std::pair<uint64_t, uint8_t>> regions;  // (chunk, role)
  std::vector<uint8_t> objects;
};

// A plan error and where the global planner meets it: phase 0 regions (by
// rank, region index), 1 tiling (by key), 2 objects (by rank, object index).
struct PlanError {
  uint8_t phase = 0;
  uint64_t rank = 0, index = 0;
  std::string key;
  Status status;
  bool operator<(const PlanError& o) const {
    return std::tie(phase, rank, index, key) < std::tie(o.phase, o.rank, o.index, o.key);
  }
};

std::string EncodeRoleReply(const ReplyRoles& roles);
// The errors an owner met that may come first in PlanError order (several
// only where a key's name is a placeholder: UnnamedKey in share_codec.h).
std::string EncodeErrorReply(const std::vector<PlanError>& errors);
// Whether `bytes` is an error reply (by its kind byte; DecodeReply checks
// the rest): the roles replies need no decoding on the error path's scans.
bool IsErrorReply(std::string_view bytes);
// Fills *roles and returns no error, or returns the errors the owner sent.
Result<std::vector<PlanError>> DecodeReply(std::string_view bytes, int owner, ReplyRoles* roles);

// An owner's records (tensors with chunk boxes, objects), locations unset.
std::string EncodeSkeleton(const internal_format::Manifest& m);
Result<internal_format::Manifest> DecodeSkeleton(std::string_view bytes, int rank);

// A rank's structure message: its skeleton and the pieces it writes (with
// their offsets); keys interned. The replicas it holds are not listed: their
// checksums go to the keys' owners (src/checkpoint/replica_owners.h).
class StructureWriter {
 public:
  explicit StructureWriter(std::string_view skeleton) : skeleton_(skeleton) {}
  void Item(bool is_object, const std::string& key, uint64_t chunk, const Shape* index,
            uint64_t offset, uint64_t nbytes);
  std::string Finish();

 private:
  uint32_t Intern(const std::string& key);
  void Ref(internal_base::ByteWriter& w, bool is_object, const std::string& key, uint64_t chunk,
           const Shape* index);
  std::string_view skeleton_;
  std::unordered_map<std::string, uint32_t> ids_;
  internal_base::ByteWriter keys_, items_;
  uint64_t nitems_ = 0;
};

struct PieceRef {
  bool is_object = false;
  uint32_t key = 0;  // into Structure::keys
  uint64_t chunk = 0;
  Shape index;
  uint64_t offset = 0, nbytes = 0;
};

struct Structure {
  internal_format::Manifest skeleton;  // tensors and objects only
  std::vector<std::string> keys;
  std::vector<PieceRef> items;
};
Result<Structure> DecodeStructure(std::string_view bytes, int rank);

}  // namespace shardpoint::internal_plan
