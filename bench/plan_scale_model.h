// The model and layouts of plan_scale_bench and plan_scale_sampled: a
// Llama-3-70B-like model (or its MoE variant) under Megatron TP x PP x DP
// (x EP), every rank's tensors without memory, and the same one key at a
// time (KeyTensor, KeyHolders) so that a tool can build the shares of one
// key from every rank holding it without building any rank's whole layout.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>
#include <vector>

#include "shardpoint/layout.h"
#include "src/plan/regions.h"
#include "src/plan/save_plan.h"

namespace plan_scale {

using namespace shardpoint;

struct Model {
  int layers = 80;
  int64_t hidden = 8192, ffn = 28672, vocab = 128256;
  int64_t heads = 64, kv_heads = 8;
  int experts = 0;  // > 0: every layer's MLP is this many experts of `ffn` (MoE)
  int64_t qkv_rows() const { return hidden + 2 * (hidden / heads) * kv_heads; }
};

struct Layout {
  int tp = 8, pp = 8, dp = 64;
  int ep = 1;  // expert parallel: the DP ranks split the experts EP ways
  bool dist_opt = true;
  int world() const { return tp * pp * dp; }
};

[[noreturn]] inline void Die(const std::string& msg) {
  std::fprintf(stderr, "plan_scale: %s\n", msg.c_str());
  std::exit(1);
}

template <typename T>
T Check(Result<T> r, const char* what) {
  if (!r.ok()) Die(std::string(what) + ": " + r.status().ToString());
  return std::move(*r);
}

// This thread's CPU seconds: the figures are per-rank compute, and this
// project's shared machine runs at a load average of 10 to 20, where wall
// time says more about the neighbours than about the planner.
inline double Now() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Never dereferenced: BuildRegions only offsets it.
inline void* const kFakeData = reinterpret_cast<void*>(uintptr_t{1} << 44);

enum class Kind { kReplicated, kRow, kCol, kSwiGLU };

struct Param {
  std::string key;
  Shape shape;
  Kind kind;
  int layer;  // -1: embedding (first stage) or final norm / output (last stage)
  bool first_stage;
  int expert = -1;  // MoE: the expert this weight belongs to
};

inline std::vector<Param> Params(const Model& m) {
  std::vector<Param> ps;
  const int64_t h = m.hidden;
  ps.push_back({"embedding.word_embeddings.weight", {m.vocab, h}, Kind::kRow, -1, true});
  for (int l = 0; l < m.layers; ++l) {
    const std::string p = "decoder.layers." + std::to_string(l) + ".";
    ps.push_back({p + "input_layernorm.weight", {h}, Kind::kReplicated, l, false});
    ps.push_back({p + "self_attention.linear_qkv.weight", {m.qkv_rows(), h}, Kind::kRow, l, false});
    ps.push_back({p + "self_attention.linear_proj.weight", {h, h}, Kind::kCol, l, false});
    ps.push_back({p + "pre_mlp_layernorm.weight", {h}, Kind::kReplicated, l, false});
    if (m.experts > 0) {
      ps.push_back({p + "mlp.router.weight", {m.experts, h}, Kind::kReplicated, l, false});
      for (int e = 0; e < m.experts; ++e) {
        const std::string x = p + "mlp.experts.local_experts." + std::to_string(e) + ".";
        ps.push_back({x + "linear_fc1.weight", {2 * m.ffn, h}, Kind::kSwiGLU, l, false, e});
        ps.push_back({x + "linear_fc2.weight", {h, m.ffn}, Kind::kCol, l, false, e});
      }
      continue;
    }
    ps.push_back({p + "mlp.linear_fc1.weight", {2 * m.ffn, h}, Kind::kSwiGLU, l, false});
    ps.push_back({p + "mlp.linear_fc2.weight", {h, m.ffn}, Kind::kCol, l, false});
  }
  ps.push_back({"decoder.final_layernorm.weight", {h}, Kind::kReplicated, -1, false});
  ps.push_back({"output_layer.weight", {m.vocab, h}, Kind::kRow, -1, false});
  return ps;
}

// The TP-local tensor of `p` (data unset).
inline LocalTensor TpLocal(const std::string& key, DType dtype, const Param& p, int tp, int tps) {
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

// One key: parameter `param` of Params() and `state` -1 (the bf16 weight) or
// 0..2 (fp32_param, exp_avg, exp_avg_sq). A rank's tensors are its keys in
// Order() order.
struct KeySpec {
  int param;
  int state;
  std::string key;
  int Order(size_t num_params) const { return (state + 1) * static_cast<int>(num_params) + param; }
};

inline const char* const kStates[] = {"fp32_param", "exp_avg", "exp_avg_sq"};

// Every key of the model, in rank order (bf16 weights, then each state).
inline std::vector<KeySpec> AllKeys(const std::vector<Param>& params) {
  std::vector<KeySpec> keys;
  for (int s = -1; s < 3; ++s) {
    for (size_t i = 0; i < params.size(); ++i) {
      keys.push_back({static_cast<int>(i), s,
                      s < 0 ? params[i].key
                            : std::string("optimizer.state.") + kStates[s] + "." + params[i].key});
    }
  }
  return keys;
}

// Rank = tp + TP * (dp + DP * pp), as Megatron orders them.
struct Coord {
  int tp, dp, pp;
};
inline Coord CoordOf(const Layout& L, int rank) {
  return {rank % L.tp, (rank / L.tp) % L.dp, rank / (L.tp * L.dp)};
}
inline int RankOf(const Layout& L, int tp, int dp, int pp) { return tp + L.tp * (dp + L.dp * pp); }

inline int PerEp(const Model& m, const Layout& L) {
  return m.experts > 0 ? std::max(1, m.experts / L.ep) : 1;
}

// The stage holding `p`, and whether DP rank `dp` holds it (MoE: DP rank dp
// holds the experts of EP rank dp % EP).
inline int StageOf(const Model& m, const Layout& L, const Param& p) {
  return p.layer >= 0 ? p.layer / (m.layers / L.pp) : (p.first_stage ? 0 : L.pp - 1);
}
inline bool DpHolds(const Model& m, const Layout& L, const Param& p, int dp) {
  return p.expert < 0 || p.expert / PerEp(m, L) == dp % L.ep;
}

// Every rank holding `p`, ascending.
inline std::vector<int> KeyHolders(const Model& m, const Layout& L, const Param& p) {
  std::vector<int> out;
  const int pp = StageOf(m, L, p);
  for (int dp = 0; dp < L.dp; ++dp) {
    if (!DpHolds(m, L, p, dp)) continue;
    for (int tp = 0; tp < L.tp; ++tp) out.push_back(RankOf(L, tp, dp, pp));
  }
  std::sort(out.begin(), out.end());
  return out;
}

// The tensor of key `k` on the rank at (tp, dp). The optimizer state is
// sharded flat over DP (torch.chunk sizes), an expert's over the DP / EP
// ranks holding the same experts, as Megatron's expert parallelism does.
inline LocalTensor KeyTensor(const Layout& L, const Param& p, const KeySpec& k, int tp, int dp) {
  const bool opt = k.state >= 0;
  LocalTensor lt = TpLocal(k.key, opt ? DType::kF32 : DType::kBF16, p, tp, L.tp);
  if (!opt || !L.dist_opt) {
    lt.data = kFakeData;
    return lt;
  }
  const bool expert = p.expert >= 0;
  const int count = expert ? L.dp / L.ep : L.dp, me = expert ? dp / L.ep : dp;
  const int64_t n = Box::Whole(lt.shape).num_elements();
  const int64_t c = n / count + (n % count != 0);  // ChunkSizes(n, count), in O(1)
  const int64_t begin = std::min(n, me * c), end = std::min(n, begin + c);
  return Check(FlatShard(lt, FlatRange{begin, end}, kFakeData), "FlatShard");
}

inline std::vector<LocalTensor> RankTensors(const Model& m, const Layout& L,
                                            const std::vector<Param>& params,
                                            const std::vector<KeySpec>& keys, int rank) {
  const Coord c = CoordOf(L, rank);
  std::vector<LocalTensor> out;
  for (const KeySpec& k : keys) {
    const Param& p = params[k.param];
    if (StageOf(m, L, p) != c.pp || !DpHolds(m, L, p, c.dp)) continue;
    out.push_back(KeyTensor(L, p, k, c.tp, c.dp));
  }
  return out;
}

inline internal_plan::ObjectDesc RngObject(int rank, int world) {
  return internal_plan::ObjectDesc{"rng_state", {rank}, {world}, 32};
}

inline internal_plan::Contribution ToContribution(const std::vector<internal_plan::Region>& regions,
                                                  int rank, int world) {
  internal_plan::Contribution c;
  c.regions.reserve(regions.size());
  for (const internal_plan::Region& r : regions) c.regions.push_back(r.desc);
  c.objects.push_back(RngObject(rank, world));
  return c;
}

// Flags both tools take; returns false on an unknown one (left in `i`).
inline int IntFlag(int argc, char** argv, int& i) {
  if (i + 1 >= argc) Die(std::string("missing value for ") + argv[i]);
  return std::atoi(argv[++i]);
}

inline bool ParseCommonFlag(int argc, char** argv, int& i, Model& m, Layout& save, Layout& load) {
  const std::string a = argv[i];
  struct {
    const char* name;
    int* v;
  } ints[] = {{"--tp", &save.tp},      {"--pp", &save.pp},        {"--dp", &save.dp},
              {"--load-tp", &load.tp}, {"--load-pp", &load.pp},   {"--load-dp", &load.dp},
              {"--layers", &m.layers}, {"--experts", &m.experts}, {"--ep", &save.ep},
              {"--load-ep", &load.ep}};
  for (auto& f : ints) {
    if (a == f.name) return *f.v = IntFlag(argc, argv, i), true;
  }
  struct {
    const char* name;
    int64_t* v;
  } longs[] = {{"--hidden", &m.hidden},
               {"--ffn", &m.ffn},
               {"--vocab", &m.vocab},
               {"--heads", &m.heads},
               {"--kv-heads", &m.kv_heads}};
  for (auto& f : longs) {
    if (a == f.name) return *f.v = IntFlag(argc, argv, i), true;
  }
  if (a == "--no-dist-opt") return save.dist_opt = load.dist_opt = false, true;
  return false;
}

inline void CheckLayouts(const Model& m, const Layout& save, const Layout& load) {
  if (m.layers % save.pp || m.layers % load.pp) Die("layers must divide by both PP sizes");
  if (save.dp % save.ep || load.dp % load.ep || (m.experts > 0 && m.experts % save.ep) ||
      (m.experts > 0 && m.experts % load.ep)) {
    Die("EP must divide DP and the number of experts");
  }
}

inline void PrintModel(const Model& m, const Layout& save, const Layout& load, size_t nparams) {
  std::printf(
      "model: %d layers, hidden %ld, ffn %ld (fc1 %ld rows), qkv %ld rows, vocab %ld; "
      "%zu parameters + Adam state\n",
      m.layers, static_cast<long>(m.hidden), static_cast<long>(m.ffn), static_cast<long>(2 * m.ffn),
      static_cast<long>(m.qkv_rows()), static_cast<long>(m.vocab), nparams);
  if (m.experts > 0) {
    std::printf("MoE: %d experts a layer, EP=%d (save) / %d (load)\n", m.experts, save.ep, load.ep);
  }
  std::printf("save layout: TP=%d x PP=%d x DP=%d = %d ranks%s\n", save.tp, save.pp, save.dp,
              save.world(), save.dist_opt ? ", distributed optimizer (flat shards over DP)" : "");
}

}  // namespace plan_scale
