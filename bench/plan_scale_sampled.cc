// plan_scale_sampled: plan_scale_bench's figures at 65,536 and 131,072 ranks,
// in one process, without building every rank's layout.
//
//   plan_scale_sampled [--tp 8 --pp 16 --dp 512] [--load-tp 4 --load-pp 4 --load-dp 256]
//                      [--experts 64 --ep 64 --load-ep 64] [--dp-samples 4] (+ model flags)
//                      [--shard-kb 64 --part-kb 16] [--manifest-cache FILE]
//                      [--rank-dir DIR] [--commit-only]
//
// --shard-kb, --part-kb: the manifest's shard size and the size of the parts
// larger records are cut into (format v4).
// --manifest-cache: write the modelled manifest to FILE; if FILE exists,
// only the load figures are computed, from it (for trying part sizes).
// --rank-dir: write the index and what each sampled loading rank reads to
// DIR, for plan_scale_rank (bench/plan_scale_rank_dir.h).
// --commit-only: the planning and commit figures only (no load).
//
// The owners' side is computed for EVERY rank: each key's owner (XXH3 mod N)
// receives the shares of every rank holding the key (each rank's RNG object
// goes to the owner of its (key, index)), generated one key at a
// time from the layout generator (KeyTensor: the key's tensor on one rank,
// no rank's whole layout), checks them with PlanOwnedKeys and replies. So the
// bytes every rank sends and receives in planning and every owner's time are
// exact, whatever is sampled. Only the local side (EncodeShares of the rank's
// whole contribution + PlanLocal from its replies) runs for a sample of ranks:
// every (TP, PP, EP) coordinate class, and in each the DP ranks 0, 1, middle
// and last of those holding the same experts (--dp-samples 2: first and last).
//
// Why a sample covers every rank: within a class, the DP ranks hold the same
// keys; their bf16 weights are the same boxes (replicas), and their optimizer
// state is the same tensors cut at other flat offsets (torch.chunk: equal
// pieces, only the last ones shorter or empty, hence the last DP rank in the
// sample). So the local work (regions, shares, roles, file layout) of two DP
// ranks of a class differs only in offsets and in which replicas the owners
// chose it to write: the same sizes of messages and the same work up to the
// pieces it writes. What does differ by rank, the keys a rank owns (a hash),
// is computed for every rank above. Checked: the shares each sampled rank
// sends (from its whole layout) have the sizes the key-at-a-time generator
// gave the owners, or the tool fails.
//
// The manifest is modelled from the owners' skeletons and writer choices:
// exact records (keys, boxes, file of each chunk's writer), offsets a running
// sum per writer (its real file order needs its PlanLocal; offsets are fixed
// 8-byte fields, so sizes and decode times do not depend on them). The
// commit (src/checkpoint/owner_commit.h, bench/plan_scale_commit.h): a
// sampled rank's messages to the keys' owners and to rank 0 are exact from
// its LocalPlan (structures, a checksum per item and each tensor item's
// block checksums, one per MiB); rank 0's total is the sample's mean times
// the rank count plus every owner's part, exact from the modelled manifest
// (each owner's records split as the save splits them); an owner's inbox is
// estimated from its keys' records. The loads read the shards as the owners
// write them. The replica checksums' exchange with the keys' owners
// (verify_replicas, src/checkpoint/replica_owners.h) is exact for every
// rank: each holder's message to each owner, built from the owner's replies.
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "bench/plan_scale_commit.h"
#include "bench/plan_scale_model.h"
#include "bench/plan_scale_partial.h"
#include "bench/plan_scale_rank_dir.h"
#include "src/checkpoint/checksum_message.h"
#include "src/checkpoint/replica_owners.h"
#include "src/format/manifest.h"
#include "src/format/manifest_index.h"
#include "src/plan/dist_plan.h"
#include "src/plan/dist_plan_codec.h"
#include "src/plan/load_plan.h"

using namespace plan_scale;
using shardpoint::internal_checkpoint::ReplicaSumsWriter;
using shardpoint::internal_format::ChunkRecord;
using shardpoint::internal_format::Manifest;
using shardpoint::internal_format::ObjectRecord;
using shardpoint::internal_format::TensorRecord;
using shardpoint::internal_plan::BuildRegions;
using shardpoint::internal_plan::Contribution;
using shardpoint::internal_plan::DecodeReply;
using shardpoint::internal_plan::DecodeStructure;
using shardpoint::internal_plan::EncodeShares;
using shardpoint::internal_plan::EncodeSkeleton;
using shardpoint::internal_plan::KeyOwner;
using shardpoint::internal_plan::ObjectOwner;
using shardpoint::internal_plan::OwnerOutcome;
using shardpoint::internal_plan::PlanLocal;
using shardpoint::internal_plan::PlanOwnedKeys;
using shardpoint::internal_plan::Region;
using shardpoint::internal_plan::Replies;
using shardpoint::internal_plan::ReplyRoles;
using shardpoint::internal_plan::StructureWriter;
using shardpoint::internal_plan::WritesPiece;

namespace {

struct Setup {
  Model m;
  Layout save{8, 16, 512, 1, true}, load{4, 4, 256, 1, true};
  int dp_samples = 4;
  std::string rank_dir;  // --rank-dir
  std::vector<Param> params;
  std::vector<KeySpec> keys;
};

// Per rank: planning bytes (exact, every rank), owner seconds (every rank),
// and for the sample its replies, skeleton and local seconds.
struct Tally {
  std::vector<uint64_t> sent, received;
  std::vector<uint64_t> share_sent;                      // of `sent`: its shares to the owners
  std::vector<uint64_t> replica_sent, replica_received;  // the replica sums' exchange
  std::vector<double> owner_secs;
  std::vector<char> sampled;
  std::unordered_map<int, std::vector<std::pair<int, std::string>>> outbox;
  std::unordered_map<int, std::string> skeleton;
  // The modelled manifest: records, and per writer its bytes so far.
  std::vector<TensorRecord> tensors;
  std::vector<ObjectRecord> objects;
  std::vector<uint64_t> written;
  std::vector<char> writes;  // the rank writes a chunk or an object
  double gen_secs = 0;
  double rank0_fixed = 0;  // rank 0's commit inbox but for the owners' parts
};

std::vector<int> Sample(const Setup& s) {
  const Layout& L = s.save;
  const int per = L.dp / L.ep;  // DP ranks holding the same experts
  std::vector<int> edps = {0, per - 1};
  if (s.dp_samples >= 4) edps = {0, 1, per / 2, per - 1};
  std::sort(edps.begin(), edps.end());
  edps.erase(std::unique(edps.begin(), edps.end()), edps.end());
  std::vector<int> out;
  for (int pp = 0; pp < L.pp; ++pp)
    for (int e = 0; e < L.ep; ++e)
      for (int edp : edps)
        for (int tp = 0; tp < L.tp; ++tp) out.push_back(RankOf(L, tp, e + L.ep * edp, pp));
  std::sort(out.begin(), out.end());
  return out;
}

// The shares owner `o` receives: every holder's regions of its keys (in
// each holder's order) and the RNG objects of the ranks in `rng`.
std::map<int, Contribution> OwnerInbox(const Setup& s, const std::vector<int>& mine,
                                       const std::vector<int>& rng) {
  std::map<int, Contribution> subs;
  const Layout& L = s.save;
  for (int ki : mine) {
    const KeySpec& k = s.keys[ki];
    const Param& p = s.params[k.param];
    const int pp = StageOf(s.m, L, p);
    for (int dp = 0; dp < L.dp; ++dp) {
      if (!DpHolds(s.m, L, p, dp)) continue;
      for (int tp = 0; tp < L.tp; ++tp) {
        std::vector<Region> regions =
            Check(BuildRegions({KeyTensor(L, p, k, tp, dp)}), "BuildRegions");
        auto& sub = subs[RankOf(L, tp, dp, pp)].regions;
        for (const Region& r : regions) sub.push_back(r.desc);
      }
    }
  }
  for (int r : rng) subs[r].objects.push_back(RngObject(r, L.world()));
  return subs;
}

// The writer of each chunk and object the owner numbered, from its replies:
// its skeleton's records with the writer's rank as file, appended to `t`.
void ModelRecords(const std::map<int, Contribution>& subs, const OwnerOutcome& out, Tally& t) {
  StructureWriter w(out.skeleton);
  Manifest sk = Check(DecodeStructure(w.Finish(), 0), "DecodeStructure").skeleton;
  std::unordered_map<std::string, size_t> at;
  for (size_t i = 0; i < sk.tensors.size(); ++i) at[sk.tensors[i].key] = i;
  for (const auto& [s, bytes] : out.replies) {
    ReplyRoles roles;
    if (!Check(DecodeReply(bytes, 0, &roles), "DecodeReply").empty()) Die("plan error in a reply");
    const Contribution& c = subs.at(s);
    for (size_t j = 0; j < roles.regions.size(); ++j) {
      if (!WritesPiece(roles.regions[j].second)) continue;
      ChunkRecord& ch = sk.tensors[at.at(c.regions[j].key)].chunks[roles.regions[j].first];
      ch.file = static_cast<uint32_t>(s), ch.offset = t.written[s], t.written[s] += ch.nbytes;
      t.writes[s] = 1;
    }
    for (size_t j = 0; j < roles.objects.size(); ++j) {
      if (!WritesPiece(roles.objects[j])) continue;
      for (ObjectRecord& o : sk.objects) {
        if (o.index == c.objects[j].index) o.file = static_cast<uint32_t>(s), t.writes[s] = 1;
      }
    }
  }
  for (TensorRecord& r : sk.tensors) t.tensors.push_back(std::move(r));
  for (ObjectRecord& o : sk.objects) t.objects.push_back(std::move(o));
}

// The replica checksums' exchange after the writes (verify_replicas): what
// each holder of owner o's keys sends it, from the roles the owner replied.
// A replica's position in its holder's list is a fixed u32: sizes are exact.
void ReplicaTraffic(const std::map<int, Contribution>& subs, const OwnerOutcome& out, int o,
                    Tally& t) {
  using shardpoint::internal_plan::kRoleReplica;
  using shardpoint::internal_plan::kRoleWriteShared;
  for (const auto& [s, bytes] : out.replies) {
    ReplyRoles roles;
    if (!Check(DecodeReply(bytes, 0, &roles), "DecodeReply").empty()) Die("plan error in a reply");
    const Contribution& c = subs.at(s);
    ReplicaSumsWriter w;
    for (size_t j = 0; j < roles.regions.size(); ++j) {
      const auto [chunk, role] = roles.regions[j];
      if (role == kRoleWriteShared) w.Written(c.regions[j].key, chunk, c.regions[j].box, 0);
      if (role == kRoleReplica) w.Replica(c.regions[j].key, chunk, 0, 0);
    }
    for (size_t j = 0; j < roles.objects.size(); ++j) {
      if (roles.objects[j] == kRoleWriteShared) {
        w.WrittenObject(c.objects[j].key, c.objects[j].index, 0);
      }
      if (roles.objects[j] == kRoleReplica)
        w.ReplicaObject(c.objects[j].key, c.objects[j].index, 0, 0);
    }
    if (w.empty()) continue;
    const uint64_t n = w.Finish().size();
    t.replica_sent[s] += n;
    t.replica_received[o] += n;
  }
}

// Every owner in turn: its inbox generated key by key, its check timed.
void RunOwners(const Setup& s, Tally& t) {
  const int world = s.save.world();
  std::map<int, std::vector<int>> owned, rng;  // keys; ranks whose RNG object
  for (size_t i = 0; i < s.keys.size(); ++i) owned[KeyOwner(s.keys[i].key, world)].push_back(i);
  for (int r = 0; r < world; ++r) {
    const int o = ObjectOwner("rng_state", RngObject(r, world).index, world);
    (void)owned[o];
    rng[o].push_back(r);
  }
  for (const auto& [o, mine] : owned) {
    double g0 = Now();
    std::map<int, Contribution> subs = OwnerInbox(s, mine, rng[o]);
    std::vector<std::pair<int, std::string>> shares;
    shares.reserve(subs.size());
    for (const auto& [h, sub] : subs) {
      shares.emplace_back(h, std::move(EncodeShares(sub, 1)[0]));
      t.sent[h] += shares.back().second.size() + 1;  // + the status byte
      t.share_sent[h] += shares.back().second.size() + 1;
      t.received[o] += shares.back().second.size() + 1;
    }
    Replies in(shares.begin(), shares.end());
    double t0 = Now();
    OwnerOutcome out = Check(PlanOwnedKeys(in), "PlanOwnedKeys");
    t.owner_secs[o] += Now() - t0;
    t.gen_secs += t0 - g0;
    if (!out.error_reply.empty()) Die("plan error at owner " + std::to_string(o));
    ModelRecords(subs, out, t);
    ReplicaTraffic(subs, out, o, t);
    for (auto& [r, bytes] : out.replies) {
      t.sent[o] += bytes.size() + 1;
      t.received[r] += bytes.size() + 1;
      if (t.sampled[r]) t.outbox[r].emplace_back(o, std::move(bytes));
    }
    if (t.sampled[o]) t.skeleton[o] = std::move(out.skeleton);
  }
}

std::pair<double, double> MedianMax(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v.back()};
}

// The sampled ranks' local side: whole layout, shares (checked against the
// generator's sizes), PlanLocal from the owners' replies.
void RunSample(const Setup& s, const std::vector<int>& sample, Tally& t) {
  const int world = s.save.world();
  const std::string no_keys = EncodeSkeleton(Manifest{});
  std::vector<double> local, total, structure, to_owners, commit;
  for (int r : sample) {
    std::vector<Region> regions =
        Check(BuildRegions(RankTensors(s.m, s.save, s.params, s.keys, r)), "BuildRegions");
    Contribution c = ToContribution(regions, r, world);
    double t0 = Now();
    std::vector<std::string> shares = EncodeShares(c, world);
    std::vector<std::pair<int, std::string>>& got = t.outbox[r];
    Replies in(got.begin(), got.end());
    auto sk = t.skeleton.find(r);
    auto lp = Check(PlanLocal(c, in, world, sk == t.skeleton.end() ? no_keys : sk->second, r, true),
                    "PlanLocal");
    double secs = Now() - t0;
    uint64_t sent = 0;
    for (const auto& sh : shares) sent += sh.empty() ? 0 : sh.size() + 1;
    if (sent != t.share_sent[r]) {
      Die("rank " + std::to_string(r) + ": its shares differ in size from the generator's");
    }
    local.push_back(secs);
    total.push_back(secs + t.owner_secs[r]);
    structure.push_back(static_cast<double>(lp.structure.size()));
    const RankCommit rc = CommitOf(lp);
    to_owners.push_back(static_cast<double>(rc.to_owners));
    commit.push_back(static_cast<double>(rc.to_rank0));
    std::vector<std::pair<int, std::string>>().swap(got);
  }
  auto [l_med, l_max] = MedianMax(local);
  auto [p_med, p_max] = MedianMax(total);
  auto [s_med, s_max] = MedianMax(structure);
  auto [c_med, c_max] = MedianMax(commit);
  auto [o_med, o_max] = MedianMax(to_owners);
  double sum = 0, commit_sum = 0;
  for (double x : structure) sum += x;
  for (double x : commit) commit_sum += x;
  t.rank0_fixed = commit_sum / sample.size() * world;
  std::printf(
      "  local side (EncodeShares + PlanLocal), %zu sampled ranks: median %.3f ms, max %.3f ms\n",
      sample.size(), 1e3 * l_med, 1e3 * l_max);
  std::printf(
      "  planning time (owner + local), sampled ranks: median %.3f ms, max %.3f ms   "
      "target < 1 s\n",
      1e3 * p_med, 1e3 * p_max);
  const double owner_max = *std::max_element(t.owner_secs.begin(), t.owner_secs.end());
  std::printf("  any rank, at most: max owner %.3f ms + max local %.3f ms = %.3f ms\n",
              1e3 * owner_max, 1e3 * l_max, 1e3 * (owner_max + l_max));
  std::printf(
      "  structure (the global plan's, not sent by Save): median %.1f KB, max %.1f KB; all ranks "
      "%.1f MB (sample mean x %d ranks)\n",
      s_med / 1e3, s_max / 1e3, sum / sample.size() * world / 1e6, world);
  std::printf(
      "commit (src/checkpoint/owner_commit.h):\n  to the keys' owners (places, checksums, block "
      "checksums): median %.1f KB, max %.1f KB sent\n  to rank 0 (status, objects, their "
      "checksums, report, part header): median %.1f KB, max %.1f KB; ~%.2f MB from all ranks "
      "(sample mean x %d ranks)\n",
      o_med / 1e3, o_max / 1e3, c_med / 1e3, c_max / 1e3, t.rank0_fixed / 1e6, world);
}

// The manifest rank 0 would assemble: files by writer rank, as AssemblePlan
// numbers them; records sorted by key.
Manifest BuildManifest(Tally& t, int world) {
  Manifest man;
  std::vector<uint32_t> file_of(world, 0);
  for (int r = 0; r < world; ++r) {
    if (!t.writes[r]) continue;
    file_of[r] = static_cast<uint32_t>(man.files.size());
    man.files.push_back("data/" + std::to_string(r) + ".safetensors");
  }
  for (TensorRecord& r : t.tensors) {
    for (ChunkRecord& c : r.chunks) c.file = file_of[c.file];
  }
  for (ObjectRecord& o : t.objects) o.file = file_of[o.file];
  std::sort(t.tensors.begin(), t.tensors.end(),
            [](const TensorRecord& a, const TensorRecord& b) { return a.key < b.key; });
  std::sort(t.objects.begin(), t.objects.end(), [](const ObjectRecord& a, const ObjectRecord& b) {
    return std::tie(a.key, a.index) < std::tie(b.key, b.index);
  });
  man.tensors = std::move(t.tensors);
  man.objects = std::move(t.objects);
  return man;
}

}  // namespace

namespace {

using shardpoint::internal_format::DecodeIndex;
using shardpoint::internal_format::DecodeManifest;
using shardpoint::internal_format::EncodeIndex;
using shardpoint::internal_format::EncodeManifest;
using shardpoint::internal_format::ManifestIndex;
using shardpoint::internal_format::SplitManifest;
using shardpoint::internal_format::SplitResult;
using shardpoint::internal_plan::LoadPlan;
using shardpoint::internal_plan::PlanLoad;

// One loading rank (the first of stage `stage`): its plan from the whole
// manifest, then from the index and its keys' shards only.
void LoadRank(const Setup& s, const Manifest& whole, const Manifest& decoded,
              const std::string& index_bytes, const SplitResult& split, int stage,
              double* worst_ratio, double* worst_ms, size_t* most_keys) {
  const int r = stage * s.load.tp * s.load.dp;
  double a = Now();
  std::vector<Region> regions =
      Check(BuildRegions(RankTensors(s.m, s.load, s.params, s.keys, r)), "BuildRegions");
  double b = Now();
  LoadPlan lp = Check(PlanLoad(decoded, regions), "PlanLoad");
  double c = Now();
  const PartialLoad p = LoadFromKeyShards(whole, index_bytes, split, regions, lp);
  const double ratio = p.ratio();
  const double ms = 1e3 * ((b - a) + p.decode_s + p.plan_s);
  if (!s.rank_dir.empty()) WriteRank(s.rank_dir, r, p.have, lp.bytes, lp.pieces.size());
  *worst_ratio = std::max(*worst_ratio, ratio);
  *worst_ms = std::max(*worst_ms, ms);
  *most_keys = std::max(*most_keys, p.num_keys);
  std::printf(
      "  rank %6d: %zu regions, %zu reads, %.1f MB; regions %.1f ms; whole manifest: PlanLoad "
      "%.1f ms\n    sharded: %zu shards, read %.2f MB for %.2f MB of its keys' records (%.3fx; "
      "the chunks overlapping its boxes: %.2f MB) + index; decode %.1f ms (of which DecodeIndex, "
      "its keys kept, %.1f ms), PlanLoad %.1f ms; load plan %.1f ms\n",
      r, regions.size(), lp.pieces.size(), lp.bytes / 1e6, 1e3 * (b - a), 1e3 * (c - b),
      p.shards.size(), p.read / 1e6, p.need_bytes / 1e6, ratio, p.overlap_bytes / 1e6,
      1e3 * p.decode_s, 1e3 * p.index_s, 1e3 * p.plan_s, ms);
}

// The owners' side of the commit and what rank 0 receives in all
// (`rank0_fixed`: from every rank but the owners' parts; < 0 unknown).
OwnerSplitResult CommitFigures(const Setup& s, const Manifest& whole, uint64_t shard_bytes,
                               uint64_t part_bytes, double rank0_fixed) {
  const double t0 = Now();
  OwnerSplitResult o =
      OwnerSplit(whole, s.save.world(), uint64_t{1} << 20, shard_bytes, part_bytes);
  const double secs = Now() - t0;
  auto [i_med, i_max] = MedianMax(o.owner_inbox.empty() ? std::vector<double>{0} : o.owner_inbox);
  std::printf(
      "  owners' side: %zu ranks own keys, %zu write their shards (the largest file %.1f KB); an "
      "owner receives median %.1f KB, max %.1f KB (estimated from the records)\n  rank 0 "
      "receives %.2f MB of owners' parts (their shards' index, or small records as they are)",
      o.owners, o.sharding_owners, o.largest_file / 1e3, i_med / 1e3, i_max / 1e3,
      o.parts_to_rank0 / 1e6);
  if (rank0_fixed >= 0) {
    std::printf(" + %.2f MB = %.2f MB at the commit", rank0_fixed / 1e6,
                (rank0_fixed + static_cast<double>(o.parts_to_rank0)) / 1e6);
  }
  std::printf(" (the owners' split of all ranks, one process: %.1f s)\n", secs);
  return o;
}

void LoadFigures(const Setup& s, Manifest whole, uint64_t shard_bytes, uint64_t part_bytes,
                 SplitResult split) {
  double t0 = Now();
  std::string bytes = EncodeManifest(whole);
  double t1 = Now();
  Manifest decoded = Check(DecodeManifest(bytes, "bench"), "DecodeManifest");
  double t2 = Now();
  size_t chunks = 0;
  for (const TensorRecord& r : whole.tensors) chunks += r.chunks.size();
  std::printf(
      "manifest (modelled): %zu tensors, %zu chunks, %zu files; %.1f MB; Encode %.3f s, "
      "Decode %.3f s (what every loading rank decoded before)\n",
      whole.tensors.size(), chunks, whole.files.size(), bytes.size() / 1e6, t1 - t0, t2 - t1);
  std::string().swap(bytes);
  const std::string index_bytes = EncodeIndex(split.index);
  if (!s.rank_dir.empty()) WriteWhole(s.rank_dir + "/index", index_bytes);
  double x1 = Now();
  ManifestIndex index = Check(DecodeIndex(index_bytes, "bench"), "DecodeIndex");
  double x2 = Now();
  size_t parts = 0, cut = 0;
  for (const auto& e : index.tensors) {
    parts += e.parts.size();
    cut += e.parts.size() > 1 ? 1 : 0;
  }
  std::printf(
      "sharded manifest (v%u, as the owners write it): index %.1f KB, %zu shards in %zu files "
      "(records cut at %.0f KB; %zu keys in %zu parts of ~%.0f KB); DecodeIndex %.1f ms\n",
      index.version, index_bytes.size() / 1e3, split.shards.size(), index.shard_files.size(),
      shard_bytes / 1e3, cut, parts, part_bytes / 1e3, 1e3 * (x2 - x1));
  std::printf("load layout: TP=%d x PP=%d x DP=%d = %d ranks; the first rank of each stage:\n",
              s.load.tp, s.load.pp, s.load.dp, s.load.world());
  double worst_ratio = 0, worst_ms = 0;
  size_t most_keys = 0;
  for (int stage = 0; stage < s.load.pp; ++stage) {
    LoadRank(s, whole, decoded, index_bytes, split, stage, &worst_ratio, &worst_ms, &most_keys);
  }
  // The load's request check (src/checkpoint/requests.h): a rank sends its
  // owners 8 bytes per key it requests, and every message carries a status
  // byte; the all-gather it replaced carried a byte per stored key.
  const double n = s.load.world();
  const double stored = whole.tensors.size() + 1;  // the tensors and the RNG object key
  std::printf(
      "  load request check, per rank: sends 8 B x %zu keys (the most of a sampled rank) + %.0f "
      "status bytes; the all-gather before it received %.0f ranks x (%.0f stored keys + 9 B) = "
      "%.1f MB\n",
      most_keys, n, n, stored, n * (stored + 9) / 1e6);
  std::printf(
      "  manifest bytes read per loading rank, worst: %.2fx its keys' records + the index "
      "(target <= 2x)\n",
      worst_ratio);
  std::printf(
      "  one rank's load plan (regions + DecodeIndex of its keys + its shards + PlanLoad), "
      "worst: %.1f ms   target < 50 ms\n",
      worst_ms);
}

void PlanningFigures(const Tally& t) {
  std::vector<double> sent(t.sent.begin(), t.sent.end());
  std::vector<double> recv(t.received.begin(), t.received.end());
  auto [s_med, s_max] = MedianMax(sent);
  auto [r_med, r_max] = MedianMax(recv);
  auto [o_med, o_max] = MedianMax(t.owner_secs);
  std::printf("distributed save planning (first save), every rank (exact):\n");
  std::printf("  bytes sent:      median %9.1f KB  max %9.1f KB\n", s_med / 1e3, s_max / 1e3);
  std::printf("  bytes received:  median %9.1f KB  max %9.1f KB   target <= 1 MB\n", r_med / 1e3,
              r_max / 1e3);
  std::printf("  owner check (PlanOwnedKeys): median %.3f ms, max %.3f ms (rank %ld)\n",
              1e3 * o_med, 1e3 * o_max,
              static_cast<long>(std::max_element(t.owner_secs.begin(), t.owner_secs.end()) -
                                t.owner_secs.begin()));
  std::printf("  (generating the owners' inboxes key by key, not any rank's work: %.1f s)\n",
              t.gen_secs);
  std::vector<double> rs(t.replica_sent.begin(), t.replica_sent.end());
  std::vector<double> rr(t.replica_received.begin(), t.replica_received.end());
  auto [rs_med, rs_max] = MedianMax(rs);
  auto [rr_med, rr_max] = MedianMax(rr);
  double total = 0;
  for (double x : rs) total += x;
  std::printf(
      "replica checksums to the keys' owners (verify_replicas, after the writes), every rank "
      "(exact):\n  sent: median %.1f KB, max %.1f KB; received: median %.1f KB, max %.1f KB; "
      "all ranks %.1f MB\n",
      rs_med / 1e3, rs_max / 1e3, rr_med / 1e3, rr_max / 1e3, total / 1e6);
}

}  // namespace

int main(int argc, char** argv) {
  Setup s;
  uint64_t part_bytes = shardpoint::internal_format::kDefaultPartBytes;
  uint64_t shard_bytes = shardpoint::internal_format::kDefaultShardBytes;
  std::string cache;
  bool commit_only = false;
  for (int i = 1; i < argc; ++i) {
    if (ParseCommonFlag(argc, argv, i, s.m, s.save, s.load)) continue;
    if (std::string(argv[i]) == "--dp-samples") {
      s.dp_samples = IntFlag(argc, argv, i);
    } else if (std::string(argv[i]) == "--shard-kb") {
      shard_bytes = uint64_t(IntFlag(argc, argv, i)) << 10;
    } else if (std::string(argv[i]) == "--part-kb") {
      part_bytes = uint64_t(IntFlag(argc, argv, i)) << 10;
    } else if (std::string(argv[i]) == "--rank-dir" && i + 1 < argc) {
      s.rank_dir = argv[++i];
    } else if (std::string(argv[i]) == "--commit-only") {
      commit_only = true;
    } else if (std::string(argv[i]) == "--manifest-cache" && i + 1 < argc) {
      cache = argv[++i];
    } else {
      Die(std::string("unknown flag ") + argv[i]);
    }
  }
  CheckLayouts(s.m, s.save, s.load);
  s.params = Params(s.m);
  s.keys = AllKeys(s.params);
  const int world = s.save.world();
  PrintModel(s.m, s.save, s.load, s.params.size());
  if (!cache.empty()) {
    // Load figures only, from a manifest an earlier run of the same layout
    // wrote (for trying part sizes); the planning figures need a full run.
    std::ifstream in(cache, std::ios::binary);
    if (in) {
      const std::string bytes((std::istreambuf_iterator<char>(in)), {});
      std::printf("(load figures only: the manifest from %s)\n", cache.c_str());
      Manifest whole = Check(DecodeManifest(bytes, cache), "DecodeManifest");
      OwnerSplitResult o = CommitFigures(s, whole, shard_bytes, part_bytes, -1);
      LoadFigures(s, std::move(whole), shard_bytes, part_bytes, std::move(o.split));
      return 0;
    }
  }
  Tally t;
  t.sent.assign(world, 0), t.received.assign(world, 0), t.share_sent.assign(world, 0);
  t.replica_sent.assign(world, 0), t.replica_received.assign(world, 0);
  t.owner_secs.assign(world, 0), t.sampled.assign(world, 0);
  t.written.assign(world, 0), t.writes.assign(world, 0);
  const std::vector<int> sample = Sample(s);
  for (int r : sample) t.sampled[r] = 1;
  std::printf("sample: %zu ranks (every TP x PP x EP class; DP ranks %s of each)\n", sample.size(),
              s.dp_samples >= 4 ? "0, 1, middle, last" : "first, last");
  double c0 = Now();
  RunOwners(s, t);
  double c1 = Now();
  PlanningFigures(t);
  RunSample(s, sample, t);
  double c2 = Now();
  std::printf("  (owners %.1f s, sample %.1f s)\n", c1 - c0, c2 - c1);
  Manifest whole = BuildManifest(t, world);
  OwnerSplitResult o = CommitFigures(s, whole, shard_bytes, part_bytes, t.rank0_fixed);
  if (commit_only) return 0;
  if (!cache.empty()) {
    const std::string bytes = EncodeManifest(whole);
    std::ofstream(cache, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
  }
  LoadFigures(s, std::move(whole), shard_bytes, part_bytes, std::move(o.split));
  return 0;
}
