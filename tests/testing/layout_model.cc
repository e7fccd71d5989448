#include "tests/testing/layout_model.h"

#include <functional>
#include <utility>

#include "shardpoint/layout.h"
#include "shardpoint/layout_dtensor.h"
#include "shardpoint/layout_flat.h"
#include "shardpoint/layout_fused.h"
#include "shardpoint/layout_megatron.h"
#include "shardpoint/layout_state.h"

namespace shardpoint::testing {
namespace {

// Tiny on purpose: the matrix saves 6 layouts and loads 36 pairs.
constexpr int kLayers = 8;
constexpr int kMoeLayer = 5;
constexpr int64_t kVocab = 10;  // TP4: 3, 3, 3, 1 rows
constexpr int64_t kHidden = 8;
constexpr int64_t kFfn = 6;  // TP4: 2, 2, 2, 0 rows of each of W and V
constexpr GqaDims kAttn{8, 4, 2};
constexpr int kExperts = 4;
constexpr int64_t kExpertFfn = 4;
constexpr int kEmbeddingUnit = -1, kFinalUnit = kLayers;
const char* const kStates[] = {"fp32_param", "exp_avg", "exp_avg_sq"};

// How FSDP2 x TP describes a parameter.
enum class Fsdp2 { kColumnStrided, kRowParallel, kReplicated, kShardLocal };

using Build = std::function<Result<LocalTensor>(int tp, int tp_size, const ExpertParallel& ep)>;

struct Param {
  int unit;  // kEmbeddingUnit, a layer, or kFinalUnit
  bool expert;
  Fsdp2 fsdp2;
  Build build;  // the bf16 TP (and EP) layout, data null
  std::vector<std::pair<std::string, Shape>> keys;
};

std::vector<Param> Params() {
  const DType bf16 = DType::kBF16;
  std::vector<Param> ps;
  auto whole = [&](int unit, std::string key, Shape shape) {
    ps.push_back({unit,
                  false,
                  Fsdp2::kReplicated,
                  [=](int, int, const ExpertParallel&) -> Result<LocalTensor> {
                    return WholeTensor(key, bf16, nullptr, shape);
                  },
                  {{key, shape}}});
  };
  auto column = [&](int unit, std::string key, Shape shape) {
    ps.push_back({unit,
                  false,
                  Fsdp2::kColumnStrided,
                  [=](int tp, int n, const ExpertParallel&) {
                    return ColumnParallel(key, bf16, nullptr, shape, tp, n);
                  },
                  {{key, shape}}});
  };
  auto row = [&](int unit, std::string key, Shape shape) {
    ps.push_back({unit,
                  false,
                  Fsdp2::kRowParallel,
                  [=](int tp, int n, const ExpertParallel&) {
                    return RowParallel(key, bf16, nullptr, shape, tp, n);
                  },
                  {{key, shape}}});
  };
  column(kEmbeddingUnit, "embedding.word_embeddings.weight", {kVocab, kHidden});
  for (int l = 0; l < kLayers; ++l) {
    auto key = [l](const std::string& name) { return LayerKey("decoder.layers", l, name); };
    whole(l, key("input_layernorm.weight"), {kHidden});
    const std::string q = key("self_attention.linear_q.weight"),
                      k = key("self_attention.linear_k.weight"),
                      v = key("self_attention.linear_v.weight");
    ps.push_back({l,
                  false,
                  Fsdp2::kShardLocal,
                  [=](int tp, int n, const ExpertParallel&) {
                    return GqaQkv(q, k, v, bf16, nullptr, kAttn, {kHidden}, tp, n);
                  },
                  {{q, {kAttn.heads * kAttn.head_dim, kHidden}},
                   {k, {kAttn.groups * kAttn.head_dim, kHidden}},
                   {v, {kAttn.groups * kAttn.head_dim, kHidden}}}});
    row(l, key("self_attention.linear_proj.weight"), {kHidden, kAttn.heads * kAttn.head_dim});
    whole(l, key("pre_mlp_layernorm.weight"), {kHidden});
    if (l != kMoeLayer) {
      const std::string fc1 = key("mlp.linear_fc1.weight");
      ps.push_back({l,
                    false,
                    Fsdp2::kShardLocal,
                    [=](int tp, int n, const ExpertParallel&) {
                      return SwiGluFc1(fc1, fc1, bf16, nullptr, kFfn, {kHidden}, tp, n);
                    },
                    {{fc1, {2 * kFfn, kHidden}}}});
      row(l, key("mlp.linear_fc2.weight"), {kHidden, kFfn});
      continue;
    }
    whole(l, key("mlp.router.weight"), {kExperts, kHidden});
    const std::string fc1 = key("mlp.experts.linear_fc1.weight");
    ps.push_back({l,
                  true,
                  Fsdp2::kShardLocal,
                  [=](int tp, int n, const ExpertParallel& ep) {
                    return FusedGateUpExperts(fc1, bf16, nullptr, kExpertFfn, kHidden, ep, tp, n);
                  },
                  {{fc1, {kExperts, 2 * kExpertFfn, kHidden}}}});
    auto fc2 = [key](int e) {
      return key("mlp.experts." + std::to_string(e) + ".linear_fc2.weight");
    };
    Param p{l,
            true,
            Fsdp2::kShardLocal,
            [=](int tp, int n, const ExpertParallel& ep) {
              return PerExpertWeights(fc2, bf16, nullptr, {kHidden, kExpertFfn}, 1, ep, tp, n);
            },
            {}};
    for (int e = 0; e < kExperts; ++e) p.keys.push_back({fc2(e), {kHidden, kExpertFfn}});
    ps.push_back(std::move(p));
  }
  whole(kFinalUnit, "decoder.final_layernorm.weight", {kHidden});
  column(kFinalUnit, "output_layer.weight", {kVocab, kHidden});
  return ps;
}

// The fp32 optimizer-state twin of a parameter layout.
LocalTensor StateLayout(LocalTensor t, const char* state) {
  t.dtype = DType::kF32;
  for (Segment& s : t.segments) s.key = std::string("optimizer.") + state + "." + s.key;
  return t;
}

int64_t NumElements(const LocalTensor& t) { return Box::Whole(t.shape).num_elements(); }

// `layout` held whole: the parameter and/or its three optimizer states.
void AddPlain(TestRank& r, const LocalTensor& layout, bool params, bool optimizer) {
  if (params) {
    LocalTensor t = layout;
    t.data = r.arena.Alloc(NumElements(t), t.dtype);
    r.state.tensors.push_back(std::move(t));
  }
  if (!optimizer) return;
  for (const char* st : kStates) {
    LocalTensor t = StateLayout(layout, st);
    t.data = r.arena.Alloc(NumElements(t), t.dtype);
    r.state.tensors.push_back(std::move(t));
  }
}

// `layouts` back to back in a flat buffer split over dp_size ranks; this
// rank's shard of the parameters and/or of each optimizer state.
Status AddFlat(TestRank& r, const std::vector<LocalTensor>& layouts, int dp, int dp_size,
               bool params, bool optimizer, int64_t align) {
  SP_ASSIGN_OR_RETURN(FlatBufferLayout l, PlanFlatBuffer(layouts, align, dp_size));
  if (params) {
    SP_ASSIGN_OR_RETURN(std::vector<LocalTensor> pieces,
                        FlatBufferShard(layouts, l, dp, r.arena.Alloc(l.shard_size, DType::kBF16)));
    for (LocalTensor& t : pieces) r.state.tensors.push_back(std::move(t));
  }
  if (!optimizer) return OkStatus();
  for (const char* st : kStates) {
    SP_ASSIGN_OR_RETURN(
        std::vector<LocalTensor> pieces,
        FlatBufferShard(layouts, l, dp, r.arena.Alloc(l.shard_size, DType::kF32), DType::kF32));
    for (LocalTensor& t : pieces) r.state.tensors.push_back(StateLayout(std::move(t), st));
  }
  return OkStatus();
}

// The units (embedding, layers, final) of pipeline chunk (pp, vp).
Result<std::vector<int>> ChunkUnits(const PipelineLayout& p, int pp, int vp) {
  SP_ASSIGN_OR_RETURN(std::vector<int> units, StageLayers(p, pp, vp));
  if (pp == 0 && vp == 0) units.insert(units.begin(), kEmbeddingUnit);
  if (pp == p.pp_size - 1 && vp == p.vp_size - 1) units.push_back(kFinalUnit);
  return units;
}

bool HasUnit(const std::vector<int>& v, int x) {
  for (int y : v) {
    if (y == x) return true;
  }
  return false;
}

Result<LocalTensor> Fsdp2Layout(const Param& p, int dp, int tp) {
  const DeviceMesh mesh{{2, 2}, {dp, tp}};
  const ExpertParallel no_ep{kExperts, 0, 1};
  SP_ASSIGN_OR_RETURN(LocalTensor tp_layout, p.build(tp, 2, no_ep));
  const std::string& key = p.keys[0].first;
  const Shape& shape = p.keys[0].second;
  using P = Placement;
  switch (p.fsdp2) {
    case Fsdp2::kColumnStrided:
      return DTensorShard(key, DType::kBF16, nullptr, shape, mesh,
                          {P::StridedShard(0, 2), P::Shard(0)});
    case Fsdp2::kRowParallel:
      return DTensorShard(key, DType::kBF16, nullptr, shape, mesh, {P::Shard(0), P::Shard(1)});
    case Fsdp2::kReplicated:
      return DTensorShard(key, DType::kBF16, nullptr, shape, mesh, {P::Shard(0), P::Replicate()});
    case Fsdp2::kShardLocal:
      return ShardLocal(std::move(tp_layout), 0, dp, 2, nullptr);
  }
  return InternalError("unknown FSDP2 kind");
}

Status BuildRank(MatrixLayout layout, int rank, const std::vector<Param>& params, TestRank& r) {
  const ExpertParallel no_ep{kExperts, 0, 1};
  switch (layout) {
    case MatrixLayout::kTp2Pp2Dp2: {
      const int tp = rank % 2, pp = rank / 4;
      SP_ASSIGN_OR_RETURN(std::vector<int> units, ChunkUnits({kLayers, 2, 1, {}}, pp, 0));
      for (const Param& p : params) {
        if (!HasUnit(units, p.unit)) continue;
        SP_ASSIGN_OR_RETURN(LocalTensor t, p.build(tp, 2, no_ep));
        AddPlain(r, t, true, true);
      }
      return OkStatus();
    }
    case MatrixLayout::kTp4Dp2DistOpt: {
      const int tp = rank % 4, dp = rank / 4;
      std::vector<LocalTensor> layouts;
      for (const Param& p : params) {
        SP_ASSIGN_OR_RETURN(LocalTensor t, p.build(tp, 4, no_ep));
        AddPlain(r, t, true, false);
        layouts.push_back(std::move(t));
      }
      return AddFlat(r, layouts, dp, 2, false, true, 4);
    }
    case MatrixLayout::kFsdp8: {
      for (int unit = kEmbeddingUnit; unit <= kFinalUnit; ++unit) {
        std::vector<LocalTensor> layouts;
        for (const Param& p : params) {
          if (p.unit != unit) continue;
          SP_ASSIGN_OR_RETURN(LocalTensor t, p.build(0, 1, no_ep));
          layouts.push_back(std::move(t));
        }
        SP_RETURN_IF_ERROR(AddFlat(r, layouts, rank, 8, true, true, 2));
      }
      return OkStatus();
    }
    case MatrixLayout::kFsdp2Tp2: {
      const int tp = rank % 2, dp = rank / 2;
      for (const Param& p : params) {
        SP_ASSIGN_OR_RETURN(LocalTensor t, Fsdp2Layout(p, dp, tp));
        AddPlain(r, t, true, true);
      }
      return OkStatus();
    }
    case MatrixLayout::kEp4Etp2: {
      const int tp = rank % 2, dp = rank / 2;
      const ExpertParallel ep{kExperts, dp, 4};  // expert parallelism over the DP ranks
      for (const Param& p : params) {
        SP_ASSIGN_OR_RETURN(LocalTensor t, p.build(tp, 2, p.expert ? ep : no_ep));
        AddPlain(r, t, true, true);
      }
      return OkStatus();
    }
    case MatrixLayout::kPp4Vp2Dp2: {
      const int dp = rank % 2, pp = rank / 2;
      for (int vp = 0; vp < 2; ++vp) {
        SP_ASSIGN_OR_RETURN(std::vector<int> units, ChunkUnits({kLayers, 4, 2, {}}, pp, vp));
        std::vector<LocalTensor> layouts;
        for (const Param& p : params) {
          if (!HasUnit(units, p.unit)) continue;
          SP_ASSIGN_OR_RETURN(LocalTensor t, p.build(0, 1, no_ep));
          AddPlain(r, t, true, false);
          layouts.push_back(std::move(t));
        }
        SP_RETURN_IF_ERROR(AddFlat(r, layouts, dp, 2, false, true, 4));
      }
      return OkStatus();
    }
  }
  return InternalError("unknown layout");
}

}  // namespace

std::string MatrixLayoutName(MatrixLayout layout) {
  switch (layout) {
    case MatrixLayout::kTp2Pp2Dp2:
      return "TP2xPP2xDP2";
    case MatrixLayout::kTp4Dp2DistOpt:
      return "TP4xDP2_DistOpt";
    case MatrixLayout::kFsdp8:
      return "FSDP8";
    case MatrixLayout::kFsdp2Tp2:
      return "FSDP2xTP2";
    case MatrixLayout::kEp4Etp2:
      return "EP4xETP2";
    case MatrixLayout::kPp4Vp2Dp2:
      return "PP4xVP2xDP2";
  }
  return "?";
}

int MatrixWorldSize(MatrixLayout layout) { return layout == MatrixLayout::kFsdp2Tp2 ? 4 : 8; }

testing::RefModel MatrixReference(uint64_t seed) {
  testing::RefModel ref;
  for (const Param& p : Params()) {
    for (const auto& [key, shape] : p.keys) {
      ref[key] = testing::RandomRefTensor(DType::kBF16, shape, seed + ref.size());
      for (const char* st : kStates) {
        ref[std::string("optimizer.") + st + "." + key] =
            testing::RandomRefTensor(DType::kF32, shape, seed + ref.size());
      }
    }
  }
  return ref;
}

Result<std::vector<TestRank>> BuildMatrixLayout(MatrixLayout layout, bool for_save) {
  const std::vector<Param> params = Params();
  std::vector<TestRank> ranks(MatrixWorldSize(layout));
  for (int r = 0; r < static_cast<int>(ranks.size()); ++r) {
    Status s = BuildRank(layout, r, params, ranks[r]);
    if (!s.ok()) return s.WithContext(MatrixLayoutName(layout) + " rank " + std::to_string(r));
    if (!for_save) {  // every rank asks for what rank 0 wrote
      ranks[r].state.objects.push_back(SettingObject("optimizer.sharding", ""));
      ranks[r].state.common = "";
    } else if (r == 0) {
      ranks[r].state.objects.push_back(SettingObject("optimizer.sharding", "dist"));
      ranks[r].state.common = "iteration=7";
    }
  }
  return ranks;
}

}  // namespace shardpoint::testing
