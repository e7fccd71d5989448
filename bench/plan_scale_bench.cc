// plan_scale_bench: the planner at cluster scale, in one process, without I/O.
//
//   plan_scale_bench [--tp 8 --pp 8 --dp 64] [--load-tp 4 --load-pp 4 --load-dp 256]
//                    [--layers 80] [--hidden 8192] [--ffn 28672] [--vocab 128256]
//                    [--heads 64] [--kv-heads 8] [--no-dist-opt] [--global]
//                    [--experts 64 --ep 64 --load-ep 64]
//
// A Llama-3-70B-like model (GQA-interleaved QKV, fused SwiGLU fc1 = [W; V],
// RMSNorm weights, untied embedding and output layer) in bf16 with Adam state
// (fp32 main params, exp_avg, exp_avg_sq) under Megatron TP x PP x DP, with the
// optimizer state flat-sharded over DP per parameter (torch.chunk sizes; the
// worst case for the planner: every DP rank holds a piece of every tensor).
// --experts E: every layer's MLP is E experts (each fc1/fc2 of --ffn) and a
// router; --ep: the DP ranks split the experts EP ways (DP rank d holds those
// of EP rank d % EP), their optimizer state sharded over the DP / EP ranks
// holding the same experts, as Megatron's expert parallelism does.
//
// Measures, on one core, the distributed save planning (src/plan/dist_plan.h)
// as every rank runs it, rank after rank: its shares to the keys' owners, its
// work as an owner, its local plan from the replies; per rank the payload
// bytes sent and received and the seconds taken (median and max); rank 0's
// assembly of the manifest; a warm SavePlanCache (a rank hashes its own
// contribution); the manifest's encoded size and decode time; and one rank's
// load plan (BuildRegions + PlanLoad) into another layout. --global also
// runs the all-gather planner (PlanSave over every contribution), which
// every rank ran before. No tensor memory
// is allocated: LocalTensors point at a fake address that is never touched
// (BuildRegions and the planners only compute addresses).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench/plan_scale_model.h"
#include "bench/plan_scale_partial.h"
#include "shardpoint/layout.h"
#include "src/format/manifest.h"
#include "src/format/manifest_index.h"
#include "src/plan/dist_plan.h"
#include "src/plan/load_plan.h"
#include "src/plan/plan_cache.h"
#include "src/plan/regions.h"
#include "src/plan/save_plan.h"

using shardpoint::internal_format::DecodeIndex;
using shardpoint::internal_format::DecodeManifest;
using shardpoint::internal_format::EncodeIndex;
using shardpoint::internal_format::EncodeManifest;
using shardpoint::internal_format::Manifest;
using shardpoint::internal_format::ManifestIndex;
using shardpoint::internal_format::SplitManifest;
using shardpoint::internal_format::SplitResult;
using shardpoint::internal_format::TensorRecord;
using shardpoint::internal_plan::AssemblePlan;
using shardpoint::internal_plan::BuildRegions;
using shardpoint::internal_plan::Contribution;
using shardpoint::internal_plan::DecodeContribution;
using shardpoint::internal_plan::EncodeContribution;
using shardpoint::internal_plan::EncodeShares;
using shardpoint::internal_plan::LoadPlan;
using shardpoint::internal_plan::LocalPlan;
using shardpoint::internal_plan::LocalPlanKey;
using shardpoint::internal_plan::ObjectDesc;
using shardpoint::internal_plan::OwnerOutcome;
using shardpoint::internal_plan::PlanLoad;
using shardpoint::internal_plan::PlanLocal;
using shardpoint::internal_plan::PlanOwnedKeys;
using shardpoint::internal_plan::PlanSave;
using shardpoint::internal_plan::Region;
using shardpoint::internal_plan::Replies;
using shardpoint::internal_plan::SavePlan;

using namespace shardpoint;
using namespace plan_scale;

int main(int argc, char** argv) {
  Model m;
  Layout save, load{4, 4, 256, 1, true};
  bool run_global = false;
  for (int i = 1; i < argc; ++i) {
    if (ParseCommonFlag(argc, argv, i, m, save, load)) continue;
    if (std::string(argv[i]) == "--global") {
      run_global = true;
    } else {
      Die(std::string("unknown flag ") + argv[i]);
    }
  }
  CheckLayouts(m, save, load);
  const std::vector<Param> params = Params(m);
  const int world = save.world();
  const std::vector<KeySpec> keys = AllKeys(params);
  PrintModel(m, save, load, params.size());

  // 1. Shares: every rank's regions, contribution and shares to the owners.
  std::vector<uint64_t> sent(world, 0), received(world, 0);
  std::vector<double> secs(world, 0);
  std::vector<std::vector<std::pair<int, std::string>>> inbox(world);
  // Each rank's layout is built once: its contribution is kept (encoded) for
  // step 3, which would otherwise rebuild it (about 7 ms a rank).
  std::vector<std::string> contribs(world);
  double t_describe = 0, t_cache = 0;
  size_t num_regions = 0;
  for (int r = 0; r < world; ++r) {
    double t0 = Now();
    std::vector<Region> regions =
        Check(BuildRegions(RankTensors(m, save, params, keys, r)), "BuildRegions");
    Contribution c = ToContribution(regions, r, world);
    double t1 = Now();
    std::vector<std::string> shares = EncodeShares(c, world);
    double t2 = Now();
    contribs[r] = EncodeContribution(c);
    (void)LocalPlanKey(contribs[r], r, world, true);  // a warm cache's cost
    double t3 = Now();
    t_describe += t1 - t0, t_cache += t3 - t2, secs[r] += t2 - t1;
    num_regions += regions.size();
    for (int o = 0; o < world; ++o) {
      if (shares[o].empty()) continue;
      sent[r] += shares[o].size() + 1;  // + the status byte
      received[o] += shares[o].size() + 1;
      inbox[o].emplace_back(r, std::move(shares[o]));
    }
  }
  std::printf("regions: %zu (%.0f per rank); layout builders + BuildRegions %.1f us per rank\n",
              num_regions, double(num_regions) / world, 1e6 * t_describe / world);

  // 2. Every owner's check and replies.
  std::vector<std::vector<std::pair<int, std::string>>> outbox(world);
  std::vector<std::string> skeletons(world);
  for (int o = 0; o < world; ++o) {
    double t0 = Now();
    Replies in(inbox[o].begin(), inbox[o].end());
    OwnerOutcome out = Check(PlanOwnedKeys(in), "PlanOwnedKeys");
    secs[o] += Now() - t0;
    if (!out.error_reply.empty()) Die("plan error");
    std::vector<std::pair<int, std::string>>().swap(inbox[o]);
    for (auto& [s, bytes] : out.replies) {
      sent[o] += bytes.size() + 1;
      received[s] += bytes.size() + 1;
      outbox[s].emplace_back(o, std::move(bytes));
    }
    skeletons[o] = std::move(out.skeleton);
  }

  // 3. Every rank's local plan; its structure goes to rank 0.
  std::vector<std::string> structures(world);
  uint64_t to_rank0 = 0;
  for (int r = 0; r < world; ++r) {
    Contribution c = Check(DecodeContribution(contribs[r], r), "DecodeContribution");
    std::string().swap(contribs[r]);
    double t0 = Now();
    Replies in(outbox[r].begin(), outbox[r].end());
    LocalPlan lp = Check(PlanLocal(c, in, world, skeletons[r], r, true), "PlanLocal");
    secs[r] += Now() - t0;
    std::vector<std::pair<int, std::string>>().swap(outbox[r]);
    std::string().swap(skeletons[r]);
    to_rank0 += lp.structure.size();
    structures[r] = std::move(lp.structure);
  }
  auto median_max = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return std::make_pair(v[v.size() / 2], v.back());
  };
  std::vector<double> sent_d(sent.begin(), sent.end()), recv_d(received.begin(), received.end());
  auto [s_med, s_max] = median_max(sent_d);
  auto [r_med, r_max] = median_max(recv_d);
  auto [t_med, t_max] = median_max(secs);
  std::printf("distributed save planning (first save), per rank:\n");
  std::printf("  bytes sent:      median %9.1f KB  max %9.1f KB\n", s_med / 1e3, s_max / 1e3);
  std::printf("  bytes received:  median %9.1f KB  max %9.1f KB   target <= 1 MB\n", r_med / 1e3,
              r_max / 1e3);
  std::printf("  planning time:   median %9.3f ms  max %9.3f ms   target < 1 s\n", 1e3 * t_med,
              1e3 * t_max);
  std::printf("  warm plan cache (encode + hash own contribution): %.3f ms per rank\n",
              1e3 * t_cache / world);

  // 4. Rank 0 assembles the plan.
  double a0 = Now();
  SavePlan plan = Check(AssemblePlan(structures), "AssemblePlan");
  double a1 = Now();
  std::vector<std::string>().swap(structures);
  size_t chunks = 0;
  for (const TensorRecord& t : plan.manifest.tensors) chunks += t.chunks.size();
  std::vector<uint64_t> wrote(world, 0);
  for (int r = 0; r < world; ++r) {
    for (const auto& item : plan.ranks[r].items) wrote[r] += item.nbytes;
  }
  const uint64_t most = *std::max_element(wrote.begin(), wrote.end());
  std::printf(
      "save plan: %zu tensors, %zu chunks, %zu files, %.1f GB; largest writer %.2f GB "
      "(%.2fx the mean)\n",
      plan.manifest.tensors.size(), chunks, plan.manifest.files.size(), plan.total_bytes / 1e9,
      most / 1e9, double(most) * world / plan.total_bytes);
  std::printf("  rank 0: structures received %.1f MB, AssemblePlan %.3f s\n", to_rank0 / 1e6,
              a1 - a0);

  if (run_global) {
    double g0 = Now();
    std::vector<Contribution> all(world);
    size_t exchange_bytes = 0;
    for (int r = 0; r < world; ++r) {
      std::vector<Region> regions =
          Check(BuildRegions(RankTensors(m, save, params, keys, r)), "BuildRegions");
      std::string e = EncodeContribution(ToContribution(regions, r, world));
      exchange_bytes += e.size();
      all[r] = Check(DecodeContribution(e, r), "Decode");
    }
    double g1 = Now();
    SavePlan global = Check(PlanSave(all), "PlanSave");
    double g2 = Now();
    std::printf(
        "all-gather planner (before): every rank receives %.1f MB; PlanSave %.3f s "
        "(building and decoding the contributions %.3f s)\n",
        exchange_bytes / 1e6, g2 - g1, g1 - g0);
  }
  const SavePlan* hit = &plan;

  // 4. The manifest.
  double t5 = Now();
  std::string bytes = EncodeManifest(hit->manifest);
  double t6 = Now();
  Manifest decoded = Check(DecodeManifest(bytes, "bench"), "DecodeManifest");
  double t7 = Now();
  std::printf("manifest: %.1f MB (%.0f B per chunk)\n", bytes.size() / 1e6,
              double(bytes.size()) / chunks);
  std::printf("  EncodeManifest:                  %8.3f s\n", t6 - t5);
  std::printf("  DecodeManifest:                  %8.3f s   target < 1 s\n", t7 - t6);

  // 5. Load plans into another layout: the first rank of every stage (the
  // first and last stages also hold the embedding / output layer).
  std::printf("load layout: TP=%d x PP=%d x DP=%d = %d ranks\n", load.tp, load.pp, load.dp,
              load.world());
  // The same manifest sharded (format v3): the index, and per loading rank
  // the shards of its keys, against the bytes its keys' records take.
  double x0 = Now();
  SplitResult split = SplitManifest(hit->manifest);
  const std::string index_bytes = EncodeIndex(split.index);
  double x1 = Now();
  ManifestIndex index = Check(DecodeIndex(index_bytes, "bench"), "DecodeIndex");
  double x2 = Now();
  std::printf(
      "sharded manifest (v3): index %.1f KB, %zu shards of ~%.0f KB; split %.3f s, "
      "DecodeIndex %.1f ms\n",
      index_bytes.size() / 1e3, split.shards.size(), internal_format::kDefaultShardBytes / 1e3,
      x1 - x0, 1e3 * (x2 - x1));
  std::vector<uint32_t> union_shards;
  double worst = 0, worst_sharded = 0, worst_ratio = 0;
  for (int s = 0; s < load.pp; ++s) {
    const int r = s * load.tp * load.dp;
    double a = Now();
    std::vector<LocalTensor> tensors = RankTensors(m, load, params, keys, r);
    std::vector<Region> regions = Check(BuildRegions(tensors), "BuildRegions");
    double b = Now();
    LoadPlan lp = Check(PlanLoad(decoded, regions), "PlanLoad");
    double c = Now();
    worst = std::max(worst, c - a);
    std::printf("  rank %5d: %zu regions, %zu reads, %.1f MB; regions %.1f ms, PlanLoad %.1f ms\n",
                r, regions.size(), lp.pieces.size(), lp.bytes / 1e6, 1e3 * (b - a), 1e3 * (c - b));
    // Sharded: only its keys' shards, decoded and merged; then the same plan.
    const PartialLoad p = LoadFromKeyShards(hit->manifest, index_bytes, split, regions, lp);
    union_shards.insert(union_shards.end(), p.shards.begin(), p.shards.end());
    worst_sharded = std::max(worst_sharded, (b - a) + p.decode_s + p.plan_s);
    const double ratio = p.ratio();
    worst_ratio = std::max(worst_ratio, ratio);
    std::printf(
        "    sharded: %zu shards, read %.2f MB for %.2f MB of its keys' records (%.2fx) "
        "+ index; decode %.1f ms, PlanLoad %.1f ms\n",
        p.shards.size(), p.read / 1e6, p.need_bytes / 1e6, ratio, 1e3 * p.decode_s, 1e3 * p.plan_s);
  }
  std::sort(union_shards.begin(), union_shards.end());
  union_shards.erase(std::unique(union_shards.begin(), union_shards.end()), union_shards.end());
  std::printf(
      "  one rank's load plan, worst:     %8.1f ms  target < 50 ms (whole manifest decoded "
      "once beforehand)\n",
      1e3 * worst);
  std::printf(
      "  sharded, worst (regions + DecodeIndex of its keys + its shards + PlanLoad): %.1f ms\n",
      1e3 * worst_sharded);
  std::printf(
      "  manifest bytes read per loading rank, worst: %.2fx its keys' records + the "
      "index (target <= 2x)\n",
      worst_ratio);
  std::printf(
      "  metadata reads the storage sees per load (Load: index + each needed shard "
      "once): %zu, whatever the rank count\n",
      1 + union_shards.size());
  return 0;
}
