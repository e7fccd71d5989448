#include "src/checkpoint/manifest_fetch.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <vector>

#include "src/base/bytes.h"
#include "src/base/guard.h"
#include "src/format/manifest_index.h"
#include "src/io/path.h"
#include "src/plan/regions.h"
#include "src/source/manifest_shards.h"
#include "src/source/open_source.h"

using shardpoint::internal_base::ByteReader;
using shardpoint::internal_base::ByteWriter;
using shardpoint::internal_format::DecodeIndex;
using shardpoint::internal_format::EncodedVersion;
using shardpoint::internal_format::IsIndexVersion;
using shardpoint::internal_format::KeyBoxes;
using shardpoint::internal_format::kManifestName;
using shardpoint::internal_format::ManifestIndex;
using shardpoint::internal_format::MergeShards;
using shardpoint::internal_format::ObjectAt;
using shardpoint::internal_format::ObjectKeys;
using shardpoint::internal_format::ShardsForBoxes;
using shardpoint::internal_io::JoinPath;
using shardpoint::internal_source::ReadShards;

namespace shardpoint::internal_checkpoint {
namespace {

// The boxes `state` requests by key, sorted by key (its regions; where they
// cannot be built, which the load then reports, its segments' boxes).
std::vector<KeyBoxes> Requested(const State& state) {
  std::map<std::string, std::vector<Box>> boxes;
  Result<std::vector<internal_plan::Region>> regions = internal_base::Guarded(
      "load: the regions of the state", [&] { return internal_plan::BuildRegions(state.tensors); });
  if (regions.ok()) {
    for (const internal_plan::Region& g : *regions) boxes[g.desc.key].push_back(g.desc.box);
  } else {
    for (const LocalTensor& lt : state.tensors) {
      for (const Segment& seg : lt.segments) boxes[seg.key].push_back(seg.global_box);
    }
  }
  std::vector<KeyBoxes> tensors;
  tensors.reserve(boxes.size());
  for (auto& [key, b] : boxes) tensors.push_back({key, std::move(b)});
  return tensors;
}

// The shards holding the chunks of `tensors` and the objects of `state`.
std::vector<uint32_t> Needed(const ManifestIndex& index, const State& state,
                             const std::vector<KeyBoxes>& tensors) {
  std::vector<ObjectAt> objects;
  for (const Object& o : state.objects) objects.push_back({o.key, o.index});
  return ShardsForBoxes(index, tensors, objects);
}

// Step 3 at a reader: `asks[r]` the shards rank r asked of it. Each reply is
// u8 status code, Str message, then (u32 shard, Str bytes) per shard asked.
std::vector<std::string> Serve(Storage* storage, const std::string& dir, const ManifestIndex* index,
                               const std::vector<std::vector<uint32_t>>& asks, FetchStats* stats) {
  std::vector<uint32_t> all;
  for (const auto& a : asks) all.insert(all.end(), a.begin(), a.end());
  std::sort(all.begin(), all.end());
  all.erase(std::unique(all.begin(), all.end()), all.end());
  uint64_t reads = 0;
  Result<std::vector<std::pair<uint32_t, std::string>>> read =
      index == nullptr ? Result<std::vector<std::pair<uint32_t, std::string>>>(
                             InternalError("no index to serve shards from"))
                       : internal_base::Guarded("load: reading manifest shards", [&] {
                           return ReadShards(storage, dir, *index, all, &reads);
                         });
  std::map<uint32_t, const std::string*> bytes;
  if (read.ok()) {
    for (const auto& [s, b] : *read) bytes[s] = &b;
    stats->shards_read += all.size();
    stats->storage_reads += reads;
  }
  std::vector<std::string> out(asks.size());
  for (size_t r = 0; r < asks.size(); ++r) {
    ByteWriter w;
    w.U8(static_cast<uint8_t>(read.status().code()));
    w.Str(read.status().message());
    if (read.ok()) {
      for (uint32_t s : asks[r]) {
        w.U32(s);
        w.Str(*bytes[s]);
      }
    }
    out[r] = std::move(w.str());
  }
  return out;
}

// Step 4's input: the shards in the replies, or the first error in them.
Result<std::vector<std::pair<uint32_t, std::string>>> Unpack(const std::vector<std::string>& recv) {
  std::vector<std::pair<uint32_t, std::string>> have;
  for (size_t r = 0; r < recv.size(); ++r) {
    if (recv[r].empty()) continue;
    ByteReader in(recv[r], "manifest shards from rank " + std::to_string(r));
    uint8_t code;
    std::string message;
    SP_RETURN_IF_ERROR(in.U8(&code));
    SP_RETURN_IF_ERROR(in.Str(&message));
    if (code != 0) return Status(static_cast<StatusCode>(code), message);
    while (!in.done()) {
      uint32_t s;
      std::string b;
      SP_RETURN_IF_ERROR(in.U32(&s));
      SP_RETURN_IF_ERROR(in.Str(&b));
      have.emplace_back(s, std::move(b));
    }
  }
  return have;
}

thread_local FetchStats last_stats;
std::atomic<uint64_t> cooperative_manifest_bytes{kCooperativeManifestBytes};

}  // namespace

uint64_t CooperativeManifestBytes() { return cooperative_manifest_bytes.load(); }
void SetCooperativeManifestBytes(uint64_t bytes) { cooperative_manifest_bytes.store(bytes); }

FetchStats LastFetchStats() { return last_stats; }

bool IsShardedIndex(std::string_view source_bytes) {
  return !source_bytes.empty() && source_bytes[0] == 'S' &&
         IsIndexVersion(EncodedVersion(source_bytes.substr(1)));
}

Result<internal_source::Source> FetchShardedSource(std::string_view source_bytes,
                                                   const std::string& dir, const State& state,
                                                   bool every_ranks_keys, Comm& comm,
                                                   Storage* storage, FetchStats* stats,
                                                   Status* collective) {
  const int n = comm.size();
  // 1. Every rank decodes the same bytes (so all succeed or all fail alike),
  // checking every entry but building only those of its own keys.
  std::vector<KeyBoxes> boxes = Requested(state);
  std::vector<std::string> keys;
  keys.reserve(boxes.size());
  for (const KeyBoxes& kb : boxes) keys.push_back(kb.key);
  const std::string name = JoinPath(dir, kManifestName);
  internal_format::IndexKeep keep{&keys, static_cast<uint64_t>(n),
                                  static_cast<uint64_t>(comm.rank())};
  Result<ManifestIndex> index = internal_base::Guarded("load: decoding the manifest index", [&] {
    return DecodeIndex(source_bytes.substr(1), name, &keep);
  });
  // Every rank decides alike, from the same index.
  uint64_t shard_bytes = 0;
  for (size_t i = 0; index.ok() && i < index->shards.size(); ++i) {
    shard_bytes += index->shards[i].nbytes;
  }
  every_ranks_keys = every_ranks_keys && shard_bytes <= CooperativeManifestBytes();
  if (every_ranks_keys && n > 1 && index.ok()) {
    // A cooperative load plans every rank's pieces: every tensor's entry
    // (a manifest this small decodes in a moment).
    index = internal_base::Guarded("load: decoding the manifest index",
                                   [&] { return DecodeIndex(source_bytes.substr(1), name); });
  }
  std::vector<uint32_t> need;
  if (index.ok()) need = Needed(*index, state, boxes);
  if (every_ranks_keys && n > 1) {
    // A cooperative load checks and assigns every rank's pieces on every
    // rank: each needs the records of the keys any rank requests.
    std::string mine(reinterpret_cast<const char*>(need.data()), need.size() * 4);
    std::vector<std::string> all;
    *collective = comm.AllGather(mine, &all);
    if (!collective->ok()) return *collective;
    need.clear();
    for (const std::string& a : all) {
      for (size_t i = 0; i + 4 <= a.size(); i += 4) {
        uint32_t s;
        std::memcpy(&s, a.data() + i, 4);
        need.push_back(s);
      }
    }
    std::sort(need.begin(), need.end());
    need.erase(std::unique(need.begin(), need.end()), need.end());
  }
  // 2. Ask each shard's reader.
  std::vector<ByteWriter> ask(n);
  for (uint32_t s : need) ask[s % n].U32(s);
  std::vector<std::string> send(n), recv;
  for (int r = 0; r < n; ++r) send[r] = std::move(ask[r].str());
  *collective = comm.AllToAll(send, &recv);
  if (!collective->ok()) return *collective;
  // 3. Serve what was asked of this rank.
  std::vector<std::vector<uint32_t>> asks(n);
  for (int r = 0; r < n; ++r) {
    for (size_t i = 0; i + 4 <= recv[r].size(); i += 4) {
      uint32_t s;
      std::memcpy(&s, recv[r].data() + i, 4);
      if (index.ok() && s < index->shards.size()) asks[r].push_back(s);
    }
  }
  bool asked = false;
  for (const auto& a : asks) asked = asked || !a.empty();
  send = asked ? Serve(storage, dir, index.ok() ? &*index : nullptr, asks, stats)
               : std::vector<std::string>(n);
  *collective = comm.AllToAll(send, &recv);
  if (!collective->ok()) return *collective;
  // 4. Decode this rank's shards.
  SP_RETURN_IF_ERROR(index.status());
  SP_ASSIGN_OR_RETURN(auto have, Unpack(recv));
  stats->shards_received += have.size();
  for (const auto& h : have) stats->bytes_received += h.second.size();
  // A rank that plans only its own reads keeps only the chunks meeting its
  // boxes (a cooperative load plans every rank's: it keeps them all).
  const bool own_only = !(every_ranks_keys && n > 1);
  internal_source::Source src = internal_source::EmptySource(dir, false);
  if (own_only) src.object_keys = ObjectKeys(*index);
  src.own_records_only = own_only;
  if (index->partial) {
    src.partial_tensors = true;
    src.tensor_count = index->tensor_count;
    src.tensor_numbers = std::move(index->tensor_numbers);
    src.owned_tensor_keys = std::move(index->owned_keys);
  }
  uint64_t chunk_records = 0;
  SP_ASSIGN_OR_RETURN(src.index, internal_base::Guarded("load: decoding manifest shards", [&] {
                        return MergeShards(std::move(*index), have, dir,
                                           own_only ? &boxes : nullptr, &chunk_records);
                      }));
  stats->chunks_received += chunk_records;
  for (const auto& t : src.index.tensors) stats->chunks_kept += t.chunks.size();
  last_stats = *stats;
  return src;
}

}  // namespace shardpoint::internal_checkpoint
