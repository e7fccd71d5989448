// SaveOptions::verify_replicas, checked by the keys' owners (in the all-to-all
// after the writes: owner_commit.h), so that rank 0 receives no replica.
//
// A rank sends the owner of each key it holds a replica of (KeyOwner; an
// object: ObjectOwner, as planning does) the checksum of each replica it
// holds but does not write, with the replica's position in its own list
// (RankFile::replicas); the writer of a chunk or object that other ranks hold
// replicas of (LocalPlan::shared) sends it its checksum, and of a chunk its
// box. The owner compares each replica with the writer's and keeps the first
// mismatch in (holder rank, position) order; each rank's commit message
// carries its own finding to rank 0, which takes the first over all owners:
// the error rank 0 gave when it compared every replica itself, word for word
// (key, box or index, the holder's rank, the writer's file, both checksums).
//
//   sums    u64 k, k x str key |
//           u64 w, w x (u8 is_object, u32 key, where, u64 checksum[, box]) |
//           u64 p, p x (u8 is_object, u32 key, where, u32 position, u64 checksum)
//           where = varint chunk (tensor) or dims index (object);
//           box = dims offset, dims shape; dims = varint n, n x varint
//   report  "" (no mismatch) or u64 rank, u64 position, u8 code, str message
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "shardpoint/status.h"
#include "src/plan/dist_plan.h"

namespace shardpoint::internal_checkpoint {

// One sender's message to one owner.
class ReplicaSumsWriter {
 public:
  void Written(const std::string& key, uint64_t chunk, const Box& box, uint64_t sum);
  void WrittenObject(const std::string& key, const Shape& index, uint64_t sum);
  void Replica(const std::string& key, uint64_t chunk, uint32_t position, uint64_t sum);
  void ReplicaObject(const std::string& key, const Shape& index, uint32_t position, uint64_t sum);
  bool empty() const { return nwritten_ + nreplicas_ == 0; }
  std::string Finish() const;

 private:
  uint32_t Intern(const std::string& key);
  std::unordered_map<std::string, uint32_t> ids_;
  std::string keys_, written_, replicas_;
  uint64_t nwritten_ = 0, nreplicas_ = 0;
};

// What this rank sends each owner (indexed by rank; empty where nothing):
// `item_sums` are its items' checksums (lp.file.items), `replica_sums` its
// replicas' (lp.file.replicas).
std::vector<std::string> EncodeReplicaSums(const internal_plan::Contribution& mine,
                                           const internal_plan::LocalPlan& lp,
                                           const std::vector<uint64_t>& item_sums,
                                           const std::vector<uint64_t>& replica_sums, int n);

// The first mismatch an owner found: where CompareReplicas met it (the
// holder's rank, the replica's position in its list) and the error.
struct ReplicaMismatch {
  uint64_t rank = 0, position = 0;
  Status status;
};

// An owner: compares what it received, (sender, bytes), with the writers'
// checksums. A malformed message or a replica whose writer sent nothing is
// reported as an error at the sender's first position.
std::optional<ReplicaMismatch> CompareOwnedReplicas(
    const std::vector<std::pair<int, std::string_view>>& received);

std::string EncodeReport(const std::optional<ReplicaMismatch>& m);
// Rank 0: the first mismatch over every rank's report (indexed by rank), or OK.
Status FirstMismatch(const std::vector<std::string>& reports);

}  // namespace shardpoint::internal_checkpoint
