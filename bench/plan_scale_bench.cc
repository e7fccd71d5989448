// plan_scale_bench: the planner at cluster scale, in one process, without I/O.
//
//   plan_scale_bench [--tp 8 --pp 8 --dp 64] [--load-tp 4 --load-pp 4 --load-dp 256]
//                    [--layers 80] [--hidden 8192] [--ffn 28672] [--vocab 128256]
//                    [--heads 64] [--kv-heads 8] [--no-dist-opt]
//
// A Llama-3-70B-like model (GQA-interleaved QKV, fused SwiGLU fc1 = [W; V],
// RMSNorm weights, untied embedding and output layer) in bf16 with Adam state
// (fp32 main params, exp_avg, exp_avg_sq) under Megatron TP x PP x DP, with the
// optimizer state flat-sharded over DP per parameter (torch.chunk sizes; the
// worst case for the planner: every DP rank holds a piece of every tensor).
//
// Measures, on one core: every rank's BuildRegions, the binary encoding of
// every rank's contribution, decoding all of them (what each rank does after
// the all-gather), the global save plan (PlanSave), the same with a warm
// SavePlanCache, the manifest's encoded size and decode time, and one rank's
// load plan (BuildRegions + PlanLoad) into another layout. No tensor memory
// is allocated: LocalTensors point at a fake address that is never touched
// (BuildRegions and the planners only compute addresses).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "shardpoint/layout.h"
#include "src/format/manifest.h"
#include "src/plan/load_plan.h"
#include "src/plan/plan_cache.h"
#include "src/plan/regions.h"
#include "src/plan/save_plan.h"

using shardpoint::internal_format::DecodeManifest;
using shardpoint::internal_format::EncodeManifest;
using shardpoint::internal_format::Manifest;
using shardpoint::internal_format::TensorRecord;
using shardpoint::internal_plan::BuildRegions;
using shardpoint::internal_plan::Contribution;
using shardpoint::internal_plan::DecodeContribution;
using shardpoint::internal_plan::EncodeContribution;
using shardpoint::internal_plan::HashContributions;
using shardpoint::internal_plan::LoadPlan;
using shardpoint::internal_plan::LookupPlan;
using shardpoint::internal_plan::ObjectDesc;
using shardpoint::internal_plan::PlanLoad;
using shardpoint::internal_plan::PlanSave;
using shardpoint::internal_plan::Region;
using shardpoint::internal_plan::SavePlan;
using shardpoint::internal_plan::StorePlan;

using namespace shardpoint;

namespace {

struct Model {
  int layers = 80;
  int64_t hidden = 8192, ffn = 28672, vocab = 128256;
  int64_t heads = 64, kv_heads = 8;
  int64_t qkv_rows() const { return hidden + 2 * (hidden / heads) * kv_heads; }
};

struct Layout {
  int tp = 8, pp = 8, dp = 64;
  bool dist_opt = true;
  int world() const { return tp * pp * dp; }
};

[[noreturn]] void Die(const std::string& msg) {
  std::fprintf(stderr, "plan_scale_bench: %s\n", msg.c_str());
  std::exit(1);
}

template <typename T>
T Check(Result<T> r, const char* what) {
  if (!r.ok()) Die(std::string(what) + ": " + r.status().ToString());
  return std::move(*r);
}

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Never dereferenced: BuildRegions only offsets it.
void* const kFakeData = reinterpret_cast<void*>(uintptr_t{1} << 44);

enum class Kind { kReplicated, kRow, kCol, kSwiGLU };

struct Param {
  std::string key;
  Shape shape;
  Kind kind;
  int layer;  // -1: embedding (first stage) or final norm / output (last stage)
  bool first_stage;
};

std::vector<Param> Params(const Model& m) {
  std::vector<Param> ps;
  const int64_t h = m.hidden;
  ps.push_back({"embedding.word_embeddings.weight", {m.vocab, h}, Kind::kRow, -1, true});
  for (int l = 0; l < m.layers; ++l) {
    const std::string p = "decoder.layers." + std::to_string(l) + ".";
    ps.push_back({p + "input_layernorm.weight", {h}, Kind::kReplicated, l, false});
    ps.push_back({p + "self_attention.linear_qkv.weight", {m.qkv_rows(), h}, Kind::kRow, l, false});
    ps.push_back({p + "self_attention.linear_proj.weight", {h, h}, Kind::kCol, l, false});
    ps.push_back({p + "pre_mlp_layernorm.weight", {h}, Kind::kReplicated, l, false});
    ps.push_back({p + "mlp.linear_fc1.weight", {2 * m.ffn, h}, Kind::kSwiGLU, l, false});
    ps.push_back({p + "mlp.linear_fc2.weight", {h, m.ffn}, Kind::kCol, l, false});
  }
  ps.push_back({"decoder.final_layernorm.weight", {h}, Kind::kReplicated, -1, false});
  ps.push_back({"output_layer.weight", {m.vocab, h}, Kind::kRow, -1, false});
  return ps;
}

// The TP-local tensor of `p` (data unset).
LocalTensor TpLocal(const std::string& key, DType dtype, const Param& p, int tp, int tps) {
  switch (p.kind) {
    case Kind::kReplicated:
      return WholeTensor(key, dtype, nullptr, p.shape);
    case Kind::kRow:
      return Check(SplitTensor(key, dtype, nullptr, p.shape, 0, tp, tps), "SplitTensor");
    case Kind::kCol:
      return Check(SplitTensor(key, dtype, nullptr, p.shape, 1, tp, tps), "SplitTensor");
    case Kind::kSwiGLU: {
      // Megatron's SwiGLU fc1 on TP rank i is [W_i; V_i]: shards i and tps + i
      // of the fused global tensor split 2 * tps ways.
      LocalTensor w = Check(SplitTensor(key, dtype, nullptr, p.shape, 0, tp, 2 * tps), "Split");
      LocalTensor v =
          Check(SplitTensor(key, dtype, nullptr, p.shape, 0, tps + tp, 2 * tps), "Split");
      return Check(Concat({w, v}, 0, nullptr), "Concat");
    }
  }
  Die("unreachable");
}

// Rank = tp + TP * (dp + DP * pp), as Megatron orders them.
std::vector<LocalTensor> RankTensors(const Model& m, const Layout& L,
                                     const std::vector<Param>& params, int rank) {
  const int tp = rank % L.tp, dp = (rank / L.tp) % L.dp, pp = rank / (L.tp * L.dp);
  const int per_stage = m.layers / L.pp;
  std::vector<LocalTensor> out;
  std::vector<LocalTensor> mine;
  for (const Param& p : params) {
    bool here =
        p.layer >= 0 ? p.layer / per_stage == pp : (p.first_stage ? pp == 0 : pp == L.pp - 1);
    if (!here) continue;
    LocalTensor lt = TpLocal(p.key, DType::kBF16, p, tp, L.tp);
    lt.data = kFakeData;
    out.push_back(lt);
  }
  for (const char* state : {"fp32_param", "exp_avg", "exp_avg_sq"}) {
    for (const Param& p : params) {
      bool here =
          p.layer >= 0 ? p.layer / per_stage == pp : (p.first_stage ? pp == 0 : pp == L.pp - 1);
      if (!here) continue;
      LocalTensor lt =
          TpLocal(std::string("optimizer.state.") + state + "." + p.key, DType::kF32, p, tp, L.tp);
      if (L.dist_opt) {
        const int64_t n = Box::Whole(lt.shape).num_elements();
        std::vector<int64_t> sizes = ChunkSizes(n, L.dp);
        int64_t begin = 0;
        for (int i = 0; i < dp; ++i) begin += sizes[i];
        lt = Check(FlatShard(lt, FlatRange{begin, begin + sizes[dp]}, kFakeData), "FlatShard");
      } else {
        lt.data = kFakeData;
      }
      out.push_back(std::move(lt));
    }
  }
  return out;
}

Contribution ToContribution(const std::vector<Region>& regions, int rank, int world) {
  Contribution c;
  c.regions.reserve(regions.size());
  for (const Region& r : regions) c.regions.push_back(r.desc);
  c.objects.push_back(ObjectDesc{"rng_state", {rank}, {world}, 32});
  return c;
}

int IntFlag(int argc, char** argv, int& i) {
  if (i + 1 >= argc) Die(std::string("missing value for ") + argv[i]);
  return std::atoi(argv[++i]);
}

}  // namespace

int main(int argc, char** argv) {
  Model m;
  Layout save, load{4, 4, 256, true};
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--tp")
      save.tp = IntFlag(argc, argv, i);
    else if (a == "--pp")
      save.pp = IntFlag(argc, argv, i);
    else if (a == "--dp")
      save.dp = IntFlag(argc, argv, i);
    else if (a == "--load-tp")
      load.tp = IntFlag(argc, argv, i);
    else if (a == "--load-pp")
      load.pp = IntFlag(argc, argv, i);
    else if (a == "--load-dp")
      load.dp = IntFlag(argc, argv, i);
    else if (a == "--layers")
      m.layers = IntFlag(argc, argv, i);
    else if (a == "--hidden")
      m.hidden = IntFlag(argc, argv, i);
    else if (a == "--ffn")
      m.ffn = IntFlag(argc, argv, i);
    else if (a == "--vocab")
      m.vocab = IntFlag(argc, argv, i);
    else if (a == "--heads")
      m.heads = IntFlag(argc, argv, i);
    else if (a == "--kv-heads")
      m.kv_heads = IntFlag(argc, argv, i);
    else if (a == "--no-dist-opt")
      save.dist_opt = load.dist_opt = false;
    else
      Die("unknown flag " + a);
  }
  if (m.layers % save.pp || m.layers % load.pp) Die("layers must divide by both PP sizes");
  const std::vector<Param> params = Params(m);
  const int world = save.world();
  std::printf(
      "model: %d layers, hidden %ld, ffn %ld (fc1 %ld rows), qkv %ld rows, vocab %ld; "
      "%zu parameters + Adam state\n",
      m.layers, static_cast<long>(m.hidden), static_cast<long>(m.ffn), static_cast<long>(2 * m.ffn),
      static_cast<long>(m.qkv_rows()), static_cast<long>(m.vocab), params.size());
  std::printf("save layout: TP=%d x PP=%d x DP=%d = %d ranks%s\n", save.tp, save.pp, save.dp, world,
              save.dist_opt ? ", distributed optimizer (flat shards over DP)" : "");

  // 1. Every rank's regions and encoded contribution.
  double t_describe = 0, t_regions = 0, t_encode = 0;
  size_t num_regions = 0, exchange_bytes = 0;
  std::vector<std::string> encoded(world);
  for (int r = 0; r < world; ++r) {
    double t0 = Now();
    std::vector<LocalTensor> tensors = RankTensors(m, save, params, r);
    double t1 = Now();
    std::vector<Region> regions = Check(BuildRegions(tensors), "BuildRegions");
    double t2 = Now();
    Contribution c = ToContribution(regions, r, world);
    encoded[r] = EncodeContribution(c);
    double t3 = Now();
    t_describe += t1 - t0, t_regions += t2 - t1, t_encode += t3 - t2;
    num_regions += regions.size();
    exchange_bytes += encoded[r].size();
  }
  std::printf("regions: %zu (%.0f per rank)\n", num_regions, double(num_regions) / world);
  std::printf("  layout builders, all ranks:      %8.3f s  (%.1f us per rank)\n", t_describe,
              1e6 * t_describe / world);
  std::printf("  BuildRegions, all ranks:         %8.3f s  (%.1f us per rank)\n", t_regions,
              1e6 * t_regions / world);
  std::printf(
      "  EncodeContribution, all ranks:   %8.3f s  (%.1f us per rank); exchange %.1f MB "
      "(%.0f B per region)\n",
      t_encode, 1e6 * t_encode / world, exchange_bytes / 1e6, double(exchange_bytes) / num_regions);

  // 2. The global plan, as every rank computes it after the all-gather.
  double t0 = Now();
  std::vector<Contribution> all(world);
  for (int r = 0; r < world; ++r) all[r] = Check(DecodeContribution(encoded[r], r), "Decode");
  double t1 = Now();
  SavePlan plan = Check(PlanSave(all), "PlanSave");
  double t2 = Now();
  all.clear();
  size_t chunks = 0;
  for (const TensorRecord& t : plan.manifest.tensors) chunks += t.chunks.size();
  std::printf("save plan: %zu tensors, %zu chunks, %zu files, %.1f GB\n",
              plan.manifest.tensors.size(), chunks, plan.manifest.files.size(),
              plan.total_bytes / 1e9);
  std::printf("  DecodeContribution, all ranks:   %8.3f s\n", t1 - t0);
  std::printf("  PlanSave:                        %8.3f s\n", t2 - t1);
  std::printf("  global save plan (decode + plan): %7.3f s   target < 2 s\n", t2 - t0);

  // 3. The plan again, from a warm cache.
  SavePlanCache cache;
  StorePlan(cache, HashContributions(encoded), std::make_shared<SavePlan>(std::move(plan)));
  double t3 = Now();
  std::shared_ptr<const SavePlan> hit = LookupPlan(cache, HashContributions(encoded));
  double t4 = Now();
  if (!hit) Die("the plan cache missed on identical contributions");
  std::printf("  cached plan (hash + lookup):     %8.3f s\n", t4 - t3);

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
  double worst = 0;
  for (int s = 0; s < load.pp; ++s) {
    const int r = s * load.tp * load.dp;
    double a = Now();
    std::vector<LocalTensor> tensors = RankTensors(m, load, params, r);
    std::vector<Region> regions = Check(BuildRegions(tensors), "BuildRegions");
    double b = Now();
    LoadPlan lp = Check(PlanLoad(decoded, regions), "PlanLoad");
    double c = Now();
    worst = std::max(worst, c - a);
    std::printf("  rank %5d: %zu regions, %zu reads, %.1f MB; regions %.1f ms, PlanLoad %.1f ms\n",
                r, regions.size(), lp.pieces.size(), lp.bytes / 1e6, 1e3 * (b - a), 1e3 * (c - b));
  }
  std::printf("  one rank's load plan, worst:     %8.1f ms  target < 50 ms\n", 1e3 * worst);
  return 0;
}
