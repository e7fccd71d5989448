// Messages (src/base/bytes.h):
//   to an owner (4a)  u8 0 | blob structure ("" when cached) | blob checksums |
//                     blob replica sums; or u8 1 alone from a rank that failed
//   to rank 0 (4c)    blob object structure ("" when cached) | blob object
//                     checksums | blob replica report | u8 kind | blob part |
//                     u64 bytes written | u8 wrote a file | u64 chunks owned
//                     kind 0: part = the owner's records, a v2 manifest ("" if
//                     none); kind 1: the v6 index of its shards
// checksums: checksum_message.h, for the items the receiver assembles, in
// the sender's file order.
#include "src/checkpoint/owner_commit.h"

#include <algorithm>
#include <map>
#include <memory>
#include <unordered_map>

#include "src/base/bytes.h"
#include "src/checkpoint/checksum_message.h"
#include "src/checkpoint/manifest_io.h"
#include "src/checkpoint/replica_owners.h"
#include "src/format/manifest_index.h"
#include "src/io/node_local.h"
#include "src/plan/plan_cache.h"

using shardpoint::internal_base::ByteReader;
using shardpoint::internal_base::ByteWriter;
using shardpoint::internal_format::ChunkRecord;
using shardpoint::internal_format::CombineIndexes;
using shardpoint::internal_format::DecodeIndex;
using shardpoint::internal_format::DecodeManifest;
using shardpoint::internal_format::EncodeIndex;
using shardpoint::internal_format::EncodeManifest;
using shardpoint::internal_format::Manifest;
using shardpoint::internal_format::ManifestIndex;
using shardpoint::internal_format::ObjectRecord;
using shardpoint::internal_format::SplitManifest;
using shardpoint::internal_format::TensorRecord;
using shardpoint::internal_plan::AssembleOwned;
using shardpoint::internal_plan::LocalPlan;
using shardpoint::internal_plan::OwnedPlan;
using shardpoint::internal_plan::WriteItem;

namespace shardpoint::internal_checkpoint {
namespace {

constexpr char kSent = '\0';
constexpr char kFailed = '\1';
constexpr uint8_t kInline = 0;
constexpr uint8_t kIndexPart = 1;

struct Sums {
  std::vector<uint64_t> sums;
  std::vector<std::vector<uint64_t>> blocks;
};

// The checksums of lp's tensor items grouped by their key's owner, each group
// in file order (the objects' go to rank 0 with the commit message).
std::map<int, Sums> GroupSums(const LocalPlan& lp, Written& w) {
  std::map<int, Sums> out;
  for (size_t i = 0; i < lp.item_owner.size() && i < w.sums.size(); ++i) {
    if (lp.item_owner[i] < 0) continue;
    Sums& g = out[lp.item_owner[i]];
    g.sums.push_back(w.sums[i]);
    g.blocks.push_back(i < w.blocks.size() ? std::move(w.blocks[i]) : std::vector<uint64_t>());
  }
  return out;
}

std::string EncodeSums(const Sums* g) {
  return g == nullptr ? EncodeChecksums({}, {}) : EncodeChecksums(g->sums, g->blocks);
}

// Fills the checksums `from` sent for its items of `plan` into `m`.
Status ApplySums(const std::vector<WriteItem>& items, std::string_view bytes, int from,
                 Manifest* m) {
  std::vector<std::vector<uint64_t>> blocks;
  SP_ASSIGN_OR_RETURN(std::vector<uint64_t> sums,
                      DecodeChecksums(bytes, items.size(), from, &blocks));
  for (size_t i = 0; i < items.size(); ++i) {
    const WriteItem& item = items[i];
    if (item.is_object) {
      m->objects[item.record].checksum = sums[i];
      continue;
    }
    ChunkRecord& c = m->tensors[item.record].chunks[item.chunk];
    c.checksum = sums[i];
    if (i < blocks.size()) c.block_sums = std::move(blocks[i]);
  }
  return OkStatus();
}

// `plan`'s records with the checksums each writer sent (`sums_of(rank)`:
// its message, or null if it sent none).
template <typename SumsOf>
Result<Manifest> WithChecksums(const OwnedPlan& plan, const SumsOf& sums_of) {
  Manifest m = plan.manifest;
  for (const auto& [r, items] : plan.writers) {
    const std::string_view* bytes = sums_of(r);
    if (bytes == nullptr) {
      return InternalError("save: rank " + std::to_string(r) +
                           " sent no checksums of the pieces it writes");
    }
    SP_RETURN_IF_ERROR(ApplySums(items, *bytes, r, &m));
  }
  return m;
}

// The plan of some records: `cached` where the save's plan was cached, else
// assembled from the writers' structures and handed to `store` (the cache).
template <typename Store>
Result<std::shared_ptr<const OwnedPlan>> CachedOrAssembled(
    std::shared_ptr<const OwnedPlan> cached,
    const std::vector<std::pair<int, std::string_view>>& structures, const Store& store) {
  if (cached) return cached;
  SP_ASSIGN_OR_RETURN(OwnedPlan assembled, AssembleOwned(structures));
  auto plan = std::make_shared<const OwnedPlan>(std::move(assembled));
  store(plan);
  return plan;
}

// The common blob and the user metadata of `state`, into a manifest or index.
template <typename M>
void SetState(const State& state, M* m) {
  m->has_common = state.common.has_value();
  if (m->has_common) m->common = *state.common;
  m->metadata_json = state.metadata_json;
}

struct FromWriter {
  std::string_view structure, sums, replicas;
};

// An owner: its records with checksums, assembled from what the writers
// sent (or the cache's), and its replica finding in *report.
Result<Manifest> OwnedRecords(const OwnerInbox& inbox, bool cached, SavePlanCache* cache,
                              std::string* report) {
  std::map<int, FromWriter> from;
  std::vector<std::pair<int, std::string_view>> structures, replicas;
  for (const auto& [r, payload] : inbox.from) {
    ByteReader in(payload, "save: commit message of rank " + std::to_string(r) + " to an owner");
    FromWriter f;
    for (std::string_view* v : {&f.structure, &f.sums, &f.replicas}) {
      SP_RETURN_IF_ERROR(in.BlobView(v));
    }
    SP_RETURN_IF_ERROR(in.ExpectEnd());
    if (!f.structure.empty()) structures.emplace_back(r, f.structure);
    if (!f.replicas.empty()) replicas.emplace_back(r, f.replicas);
    from[r] = f;
  }
  *report = EncodeReport(CompareOwnedReplicas(replicas));
  SP_ASSIGN_OR_RETURN(std::shared_ptr<const OwnedPlan> plan,
                      CachedOrAssembled(cached ? cache->impl().owned : nullptr, structures,
                                        [&](std::shared_ptr<const OwnedPlan> p) {
                                          if (cache) internal_plan::StoreOwnedPlan(*cache, p);
                                        }));
  return WithChecksums(*plan, [&](int r) -> const std::string_view* {
    auto it = from.find(r);
    return it == from.end() ? nullptr : &it->second.sums;
  });
}

uint64_t ChunksOf(const Manifest& m) {
  uint64_t n = 0;
  for (const TensorRecord& t : m.tensors) n += t.chunks.size();
  return n;
}

// The data file's writer rank ("data/<r>.safetensors", as AssembleOwned names
// them), for the file order of the v2 manifest: writers in rank order.
uint64_t WriterRank(const std::string& file) {
  return std::strtoull(file.c_str() + file.find('/') + 1, nullptr, 10);
}

// Rank 0: the records the owners sent as they are, and the objects, in one
// manifest with its files in writer rank order.
Status MergeInline(std::vector<Manifest>& parts, Manifest* out) {
  std::map<uint64_t, std::string> by_rank;
  for (const Manifest& p : parts) {
    for (const std::string& f : p.files) by_rank.emplace(WriterRank(f), f);
  }
  std::unordered_map<std::string, uint32_t> number;
  for (auto& [r, f] : by_rank) {
    number.emplace(f, static_cast<uint32_t>(out->files.size()));
    out->files.push_back(f);
  }
  for (Manifest& p : parts) {
    for (TensorRecord& t : p.tensors) {
      for (ChunkRecord& c : t.chunks) c.file = number.at(p.files[c.file]);
      out->tensors.push_back(std::move(t));
    }
    for (ObjectRecord& o : p.objects) {
      o.file = number.at(p.files[o.file]);
      out->objects.push_back(std::move(o));
    }
  }
  std::sort(out->tensors.begin(), out->tensors.end(),
            [](const TensorRecord& a, const TensorRecord& b) { return a.key < b.key; });
  for (size_t i = 1; i < out->tensors.size(); ++i) {
    if (out->tensors[i].key == out->tensors[i - 1].key) {
      return InternalError("save: two owners sent tensor '" + out->tensors[i].key + "'");
    }
  }
  return OkStatus();
}

struct Received {
  std::string_view object_structure, object_sums, report, part;
  uint8_t kind = kInline;
  uint64_t bytes = 0, chunks = 0;
  uint8_t wrote = 0;
};

Result<Received> ParseCommitMessage(std::string_view bytes, int r) {
  ByteReader in(bytes, "save: commit message of rank " + std::to_string(r));
  Received m;
  SP_RETURN_IF_ERROR(in.BlobView(&m.object_structure));
  SP_RETURN_IF_ERROR(in.BlobView(&m.object_sums));
  SP_RETURN_IF_ERROR(in.BlobView(&m.report));
  SP_RETURN_IF_ERROR(in.U8(&m.kind));
  SP_RETURN_IF_ERROR(in.BlobView(&m.part));
  SP_RETURN_IF_ERROR(in.U64(&m.bytes));
  SP_RETURN_IF_ERROR(in.U8(&m.wrote));
  SP_RETURN_IF_ERROR(in.U64(&m.chunks));
  SP_RETURN_IF_ERROR(in.ExpectEnd());
  if (m.kind > kIndexPart) {
    return DataLossError("save: commit message of rank " + std::to_string(r) + ": kind " +
                         std::to_string(m.kind));
  }
  return m;
}

// Rank 0: the objects with their checksums.
Result<Manifest> Objects(const std::vector<Received>& got, bool cached, SavePlanCache* cache) {
  std::vector<std::pair<int, std::string_view>> structures;
  for (size_t r = 0; !cached && r < got.size(); ++r) {
    structures.emplace_back(static_cast<int>(r), got[r].object_structure);
  }
  SP_ASSIGN_OR_RETURN(std::shared_ptr<const OwnedPlan> plan,
                      CachedOrAssembled(cached ? cache->impl().objects : nullptr, structures,
                                        [&](std::shared_ptr<const OwnedPlan> p) {
                                          if (cache) internal_plan::StoreObjectPlan(*cache, p);
                                        }));
  return WithChecksums(*plan, [&](int r) -> const std::string_view* {
    return r >= 0 && static_cast<size_t>(r) < got.size() ? &got[r].object_sums : nullptr;
  });
}

}  // namespace

bool SendsRecords(int rank, int n, uint64_t v2_bytes, uint64_t threshold) {
  return rank == 0 || v2_bytes <= threshold / static_cast<uint64_t>(n);
}

Status SendToOwners(Comm& comm, const LocalPlan* lp, bool cached, Written& written,
                    OwnerInbox* inbox, uint64_t* sent, uint64_t* received) {
  const int n = comm.size();
  std::vector<std::string> send(n);
  if (lp == nullptr) {
    send.assign(n, std::string(1, kFailed));
  } else {
    const std::map<int, Sums> sums = GroupSums(*lp, written);
    std::map<int, std::string_view> structures(lp->owner_structures.begin(),
                                               lp->owner_structures.end());
    for (int o = 0; o < n; ++o) {
      auto st = structures.find(o);
      auto g = sums.find(o);
      const std::string none;
      const std::string& rep =
          static_cast<size_t>(o) < written.replica_sums.size() ? written.replica_sums[o] : none;
      if (st == structures.end() && g == sums.end() && rep.empty()) continue;
      ByteWriter w;
      w.U8(kSent);
      w.Blob(cached || st == structures.end() ? std::string_view() : st->second);
      w.Blob(EncodeSums(g == sums.end() ? nullptr : &g->second));
      w.Blob(rep);
      send[o] = std::move(w.str());
    }
  }
  for (const std::string& s : send) *sent += s.size();
  std::vector<std::string> recv;
  SP_RETURN_IF_ERROR(comm.AllToAll(send, &recv));
  for (size_t r = 0; r < recv.size(); ++r) {
    *received += recv[r].size();
    if (recv[r].empty()) continue;
    if (recv[r][0] != kSent) {
      inbox->sender_failed = true;
      continue;
    }
    inbox->from.emplace_back(static_cast<int>(r), recv[r].substr(1));
  }
  return OkStatus();
}

Result<std::string> CommitMessageOf(const OwnerInbox& inbox, const LocalPlan& lp, bool cached,
                                    SavePlanCache* cache, const Written& written, Comm& comm,
                                    Storage* storage, const std::string& write_dir) {
  const int n = comm.size(), rank = comm.rank();
  std::string report, part;
  uint8_t kind = kInline;
  uint64_t chunks = 0;
  // A sender that failed fails the save (its status reaches rank 0 below).
  if (!inbox.sender_failed) {
    SP_ASSIGN_OR_RETURN(Manifest m, OwnedRecords(inbox, cached, cache, &report));
    chunks = ChunksOf(m);
    const ManifestSharding s = GetManifestSharding();
    std::string whole = m.tensors.empty() ? std::string() : EncodeManifest(m);
    // Rank 0 keeps its own records (they cross no link) and shards them with
    // what it receives; so it does every record where the other ranks' files
    // are out of its reach (the local tier: node_local.h).
    if (SendsRecords(rank, n, whole.size(), s.threshold) || internal_io::IsNodeLocal(storage)) {
      part = std::move(whole);
    } else {
      whole.clear();
      const auto writer = static_cast<uint32_t>(rank);
      internal_format::SplitResult split = SplitManifest(m, s.shard_bytes, s.part_bytes, writer);
      SP_RETURN_IF_ERROR(WriteShardFile(storage, write_dir, split));
      part = EncodeIndex(split.index);
      kind = kIndexPart;
    }
  }
  Sums objects;
  for (size_t i = 0; i < lp.item_owner.size() && i < written.sums.size(); ++i) {
    if (lp.item_owner[i] == -1) objects.sums.push_back(written.sums[i]);
  }
  uint64_t bytes = 0;
  for (const WriteItem& item : lp.file.items) bytes += item.nbytes;
  ByteWriter w;
  w.Blob(cached ? std::string_view() : std::string_view(lp.object_structure));
  w.Blob(EncodeSums(&objects));
  w.Blob(report);
  w.U8(kind);
  w.Blob(part);
  w.U64(bytes);
  w.U8(lp.file.file >= 0 ? 1 : 0);
  w.U64(chunks);
  return std::move(w.str());
}

Result<std::string> AssembleManifest(const std::vector<std::string>& gathered, bool cached,
                                     SavePlanCache* cache, const State& state, Storage* storage,
                                     const std::string& write_dir, CommitTotals* totals) {
  std::vector<Received> got(gathered.size());
  std::vector<std::string> reports(gathered.size());
  for (size_t r = 0; r < gathered.size(); ++r) {
    SP_ASSIGN_OR_RETURN(got[r], ParseCommitMessage(gathered[r], static_cast<int>(r)));
    reports[r] = std::string(got[r].report);
    totals->bytes += got[r].bytes;
    totals->files += got[r].wrote;
    totals->chunks += got[r].chunks;
  }
  std::vector<Manifest> inline_parts(1);
  SP_ASSIGN_OR_RETURN(inline_parts[0], Objects(got, cached, cache));
  SP_RETURN_IF_ERROR(FirstMismatch(reports));
  std::vector<ManifestIndex> indexes(1);
  for (size_t r = 0; r < got.size(); ++r) {
    const std::string what = "records of rank " + std::to_string(r);
    if (got[r].kind == kIndexPart) {
      SP_ASSIGN_OR_RETURN(indexes.emplace_back(),
                          DecodeIndex(got[r].part, "the index of the " + what));
    } else if (!got[r].part.empty()) {
      SP_ASSIGN_OR_RETURN(inline_parts.emplace_back(), DecodeManifest(got[r].part, "the " + what));
    }
  }
  Manifest whole;
  SP_RETURN_IF_ERROR(MergeInline(inline_parts, &whole));
  inline_parts.clear();
  if (indexes.size() == 1) {  // nothing sharded by an owner: as a one-rank save
    SetState(state, &whole);
    return WriteManifestShards(storage, write_dir, whole);
  }
  const ManifestSharding s = GetManifestSharding();
  indexes.erase(indexes.begin());
  if (!whole.tensors.empty() || !whole.objects.empty()) {
    internal_format::SplitResult split = SplitManifest(whole, s.shard_bytes, s.part_bytes);
    SP_RETURN_IF_ERROR(WriteShardFile(storage, write_dir, split));
    indexes.insert(indexes.begin(), std::move(split.index));
  }
  SP_ASSIGN_OR_RETURN(ManifestIndex index, CombineIndexes(std::move(indexes)));
  SetState(state, &index);
  return EncodeIndex(index);
}

}  // namespace shardpoint::internal_checkpoint
