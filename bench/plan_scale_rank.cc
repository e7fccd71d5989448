// plan_scale_rank: one loading rank's load plan, in a process of its own,
// from what plan_scale_sampled --rank-dir wrote (bench/plan_scale_rank_dir.h).
//
//   plan_scale_rank --rank-dir DIR --rank R [--repeat N] [--all-chunks] [--whole-index]
//                   (+ the model and layout flags plan_scale_sampled was given)
//
// Times, in this thread's CPU seconds, what Load does on rank R before it
// reads data: the regions of its state, DecodeIndex (keeping only its keys'
// entries, as Load does; --whole-index builds every entry, as before
// 2026-11-29), MergeShards of the shards it reads (the bytes are in memory:
// reading them is not timed) and PlanLoad (keeping only the chunks that meet
// its boxes, as Load does; --all-chunks keeps every chunk of its shards);
// checks the plan against the one the whole manifest gave. The first round runs on a fresh heap, as
// a restarted rank's does; --repeat N runs N rounds and prints each (later rounds reuse the freed
// heap).
#include <malloc.h>
#include <sys/resource.h>

#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "bench/plan_scale_model.h"
#include "bench/plan_scale_rank_dir.h"
#include "src/format/manifest_index.h"
#include "src/plan/load_plan.h"

using namespace plan_scale;
using shardpoint::internal_format::DecodeIndex;
using shardpoint::internal_format::IndexKeep;
using shardpoint::internal_format::KeyBoxes;
using shardpoint::internal_format::Manifest;
using shardpoint::internal_format::ManifestIndex;
using shardpoint::internal_format::MergeShards;
using shardpoint::internal_plan::BuildRegions;
using shardpoint::internal_plan::LoadPlan;
using shardpoint::internal_plan::PlanLoad;
using shardpoint::internal_plan::Region;

namespace {

// Minor page faults of this process so far (a fresh heap's cost is mostly
// first touches), and the bytes malloc holds in use.
long Faults() {
  rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}
double HeapMb() { return mallinfo2().uordblks / 1e6; }

struct Round {
  double regions = 0, index = 0, merge = 0, plan = 0;
  long faults[4] = {};
  double heap[4] = {};  // MB in use after each step
  double total() const { return regions + index + merge + plan; }
};

Round OneRound(const Model& m, const Layout& load, const std::vector<Param>& params,
               const std::vector<KeySpec>& keys, int rank, const std::string& index_bytes,
               RankShards have, const std::string& expect, bool all_chunks, bool whole_index) {
  Round out;
  const long f0 = Faults();
  double a = Now();
  std::vector<Region> regions =
      Check(BuildRegions(RankTensors(m, load, params, keys, rank)), "BuildRegions");
  // As Load (manifest_fetch.cc): this rank's boxes by key, whose entries
  // and chunks are kept (--all-chunks: every chunk of the shards, as
  // before 2026-11-29).
  std::map<std::string, std::vector<Box>> by_key;
  for (const Region& g : regions) by_key[g.desc.key].push_back(g.desc.box);
  std::vector<KeyBoxes> boxes;
  std::vector<std::string> names;
  for (auto& [k, v] : by_key) {
    names.push_back(k);
    boxes.push_back({k, std::move(v)});
  }
  double b = Now();
  out.faults[0] = Faults() - f0, out.heap[0] = HeapMb();
  const IndexKeep keep{&names, 65536, static_cast<uint64_t>(rank) % 65536};
  ManifestIndex index =
      Check(DecodeIndex(index_bytes, "index", whole_index ? nullptr : &keep), "DecodeIndex");
  double c = Now();
  out.faults[1] = Faults() - f0, out.heap[1] = HeapMb();
  Manifest part = Check(MergeShards(std::move(index), have, "bench", all_chunks ? nullptr : &boxes),
                        "MergeShards");
  double d = Now();
  out.faults[2] = Faults() - f0, out.heap[2] = HeapMb();
  LoadPlan lp = Check(PlanLoad(part, regions), "PlanLoad");
  double e = Now();
  out.faults[3] = Faults() - f0, out.heap[3] = HeapMb();
  if (std::to_string(lp.bytes) + " " + std::to_string(lp.pieces.size()) + "\n" != expect) {
    Die("rank " + std::to_string(rank) + ": the plan differs from the whole manifest's");
  }
  out.regions = b - a, out.index = c - b, out.merge = d - c, out.plan = e - d;
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  Model m;
  Layout save{8, 16, 512, 1, true}, load{4, 4, 256, 1, true};
  std::string dir;
  int rank = 0, repeat = 1;
  bool all_chunks = false, whole_index = false;
  for (int i = 1; i < argc; ++i) {
    if (ParseCommonFlag(argc, argv, i, m, save, load)) continue;
    const std::string a = argv[i];
    if (a == "--rank-dir" && i + 1 < argc) {
      dir = argv[++i];
    } else if (a == "--rank") {
      rank = IntFlag(argc, argv, i);
    } else if (a == "--repeat") {
      repeat = IntFlag(argc, argv, i);
    } else if (a == "--all-chunks") {
      all_chunks = true;
    } else if (a == "--whole-index") {
      whole_index = true;
    } else {
      Die("unknown flag " + a);
    }
  }
  if (dir.empty()) Die("--rank-dir DIR is required");
  CheckLayouts(m, save, load);
  const std::vector<Param> params = Params(m);
  const std::vector<KeySpec> keys = AllKeys(params);
  const std::string index_bytes = ReadWhole(dir + "/index");
  const RankShards have = ReadRankShards(dir, rank);
  const std::string expect = ReadWhole(RankFile(dir, rank, ".plan"));
  uint64_t read = 0;
  for (const auto& h : have) read += h.second.size();
  std::printf("rank %d: index %.1f KB, %zu shards, %.2f MB\n", rank, index_bytes.size() / 1e3,
              have.size(), read / 1e6);
  for (int i = 0; i < repeat; ++i) {
    const Round r =
        OneRound(m, load, params, keys, rank, index_bytes, have, expect, all_chunks, whole_index);
    std::printf(
        "  round %d: regions %.1f ms, DecodeIndex %.1f ms, MergeShards %.1f ms, PlanLoad %.1f ms;"
        " load plan %.1f ms\n",
        i, 1e3 * r.regions, 1e3 * r.index, 1e3 * r.merge, 1e3 * r.plan, 1e3 * r.total());
    std::printf(
        "    page faults so far (heap MB in use): regions %ld (%.1f), DecodeIndex %ld (%.1f), "
        "MergeShards %ld (%.1f), PlanLoad %ld (%.1f)\n",
        r.faults[0], r.heap[0], r.faults[1], r.heap[1], r.faults[2], r.heap[2], r.faults[3],
        r.heap[3]);
  }
  return 0;
}
