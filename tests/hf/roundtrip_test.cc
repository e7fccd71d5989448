// HF -> sharded load (TP2 x PP2, Megatron names, fused QKV and SwiGLU fc1)
// -> shardpoint save -> HF export: bit-identical files.
#include <gtest/gtest.h>

#include <memory>
#include <mutex>

#include "shardpoint/checkpoint.h"
#include "shardpoint/layout_megatron.h"
#include "tests/hf/hf_model.h"

namespace shardpoint {
namespace {

using namespace hftest;

// The layer number of a Megatron key, or -1 (embedding, final norm, output).
int LayerOf(const std::string& key) {
  const std::string p = "decoder.layers.";
  if (key.rfind(p, 0) != 0) return -1;
  return std::stoi(key.substr(p.size()));
}

struct RankModel {
  std::vector<std::unique_ptr<char[]>> buffers;
  State state;
  std::vector<HfKeyInfo> infos;  // parallel to state.tensors
};

// The keys a rank of TP x PP holds, laid out by the rules' hints.
Result<RankModel> BuildRank(const std::vector<HfKeyInfo>& all, int layers, int tp_rank, int tp,
                            int pp_rank, int pp, const HfParallel& ep = {}) {
  RankModel rm;
  SP_ASSIGN_OR_RETURN(std::vector<int> mine, StageLayers({layers, pp, 1, {}}, pp_rank, 0));
  for (const HfKeyInfo& info : all) {
    const int layer = LayerOf(info.key);
    bool held = layer >= 0
                    ? std::count(mine.begin(), mine.end(), layer) > 0
                    : (info.key.rfind("embedding.", 0) == 0 ? pp_rank == 0 : pp_rank == pp - 1);
    if (!held) continue;
    HfParallel p = ep;
    p.tp_rank = tp_rank, p.tp_size = tp;
    SP_ASSIGN_OR_RETURN(LocalTensor lt, HfShard(info, info.dtype, nullptr, p));
    int64_t n = 1;
    for (int64_t d : lt.shape) n *= d;
    rm.buffers.emplace_back(new char[std::max<int64_t>(1, n) * DTypeSize(info.dtype)]());
    lt.data = rm.buffers.back().get();
    rm.state.tensors.push_back(std::move(lt));
    rm.infos.push_back(info);
  }
  return rm;
}

std::string Bytes(const LocalTensor& t) {
  int64_t n = 1;
  for (int64_t d : t.shape) n *= d;
  return std::string(static_cast<const char*>(t.data), n * DTypeSize(t.dtype));
}

std::string FileBytes(const std::string& path) {
  Result<std::string> s = DefaultStorage()->ReadFileToString(path);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? *s : "";
}

// An HF model written at `dir` and described under the rules file `rules`.
struct DescribedModel {
  HfMapping mapping;
  std::vector<HfKeyInfo> infos;
};

Result<DescribedModel> WriteAndDescribe(const std::string& dir, const std::vector<HfTensor>& hf,
                                        const HfWriteOptions& wo, const std::string& rules) {
  SP_RETURN_IF_ERROR(WriteHfModel(dir, hf, wo));
  DescribedModel m;
  SP_ASSIGN_OR_RETURN(m.mapping, ReadHfMapping(RepoPath(rules)));
  SP_ASSIGN_OR_RETURN(m.infos, DescribeHf(dir, m.mapping));
  return m;
}

TEST(HfRoundTrip, LlamaTp2Pp2BitIdentical) {
  LlamaDims d;
  d.qkv_bias = true;
  const std::vector<HfTensor> hf = LlamaTensors(d);
  const std::string src = TempDir("rt_src"), ckpt = TempDir("rt_ckpt"), out = TempDir("rt_out");
  HfWriteOptions wo;
  wo.max_shard_size = 40000;  // several files
  wo.config_json = LlamaConfig(d);
  Result<DescribedModel> model = WriteAndDescribe(src, hf, wo, "rules/llama.json");
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  const HfMapping& mapping = model->mapping;
  const std::vector<HfKeyInfo>& infos = model->infos;
  EXPECT_EQ(infos.size(), 3u + 7u * d.layers);

  const int tp = 2, pp = 2;
  std::mutex mu;
  std::vector<uint64_t> read(tp * pp), held(tp * pp);
  std::vector<Status> st = RunThreadRanks(tp * pp, [&](Comm& comm) -> Status {
    const int tp_rank = comm.rank() % tp, pp_rank = comm.rank() / tp;
    SP_ASSIGN_OR_RETURN(RankModel rm, BuildRank(infos, d.layers, tp_rank, tp, pp_rank, pp));
    SP_ASSIGN_OR_RETURN(LoadResult lr, LoadFromHf(rm.state, src, mapping, comm));
    read[comm.rank()] = lr.bytes_read;
    for (const LocalTensor& t : rm.state.tensors) held[comm.rank()] += Bytes(t).size();
    // Fused targets hold the right HF rows.
    for (size_t i = 0; i < rm.infos.size(); ++i) {
      const std::string& key = rm.infos[i].key;
      const std::string got = Bytes(rm.state.tensors[i]);
      const int layer = LayerOf(key);
      const std::string p = "model.layers." + std::to_string(layer) + ".";
      std::lock_guard<std::mutex> lock(mu);
      if (key.find("linear_fc1.weight") != std::string::npos) {
        const int64_t f = d.ffn / tp;
        EXPECT_EQ(got, Rows(Find(hf, p + "mlp.gate_proj.weight"), tp_rank * f, f) +
                           Rows(Find(hf, p + "mlp.up_proj.weight"), tp_rank * f, f))
            << key;
      }
      if (key.find("linear_qkv.weight") != std::string::npos ||
          key.find("linear_qkv.bias") != std::string::npos) {
        const std::string w = key.find("bias") != std::string::npos ? "bias" : "weight";
        std::string want;
        const int64_t hpg = d.heads / d.groups, dim = d.head_dim;
        for (int64_t g = tp_rank * d.groups / tp; g < (tp_rank + 1) * d.groups / tp; ++g) {
          want += Rows(Find(hf, p + "self_attn.q_proj." + w), g * hpg * dim, hpg * dim);
          want += Rows(Find(hf, p + "self_attn.k_proj." + w), g * dim, dim);
          want += Rows(Find(hf, p + "self_attn.v_proj." + w), g * dim, dim);
        }
        EXPECT_EQ(got, want) << key;
      }
    }
    SP_ASSIGN_OR_RETURN(SaveStats ss, Save(rm.state, ckpt, comm));
    (void)ss;
    return OkStatus();
  });
  for (const Status& s : st) ASSERT_TRUE(s.ok()) << s.ToString();
  for (int r = 0; r < tp * pp; ++r) EXPECT_EQ(read[r], held[r]) << "rank " << r << " read extra";

  ExportHfOptions eo;
  eo.max_shard_size = wo.max_shard_size;
  eo.variables = {
      {"num_attention_heads", d.heads}, {"num_key_value_heads", d.groups}, {"vocab_size", d.vocab}};
  eo.block_bytes = 1000;  // many blocks per tensor
  Result<ExportHfStats> es = ExportHf(ckpt, out, mapping, eo);
  ASSERT_TRUE(es.ok()) << es.status().ToString();
  std::vector<std::string> src_files = *DefaultStorage()->ListDir(src);
  int compared = 0;
  for (const std::string& f : src_files) {
    if (f == "config.json") continue;
    EXPECT_EQ(FileBytes(src + "/" + f), FileBytes(out + "/" + f)) << f;
    ++compared;
  }
  EXPECT_GT(compared, 2);
  EXPECT_EQ(es->files, compared - 1);  // files plus the index

  Result<DiffReport> diff = DiffCheckpoints(src, out, IdentityHfMapping());
  ASSERT_TRUE(diff.ok()) << diff.status().ToString();
  EXPECT_TRUE(diff->equal());
  DiffOptions dopt;
  dopt.variables = eo.variables;
  diff = DiffCheckpoints(src, ckpt, mapping, dopt);
  ASSERT_TRUE(diff.ok()) << diff.status().ToString();
  EXPECT_TRUE(diff->equal());
  EXPECT_EQ(diff->entries.size(), infos.size());
}

// A Megatron job pads the vocabulary (50 -> 64 for TP 2): the HF embedding
// and lm_head load into the first 50 rows (padding zeroed), and export with
// the rules' "rows": "vocab_size" writes the model's 50 rows back, bit for bit.
TEST(HfRoundTrip, PaddedVocabularyLoadsAndExportsTheModelsVocabulary) {
  LlamaDims d;
  d.vocab = 50;
  d.layers = 2;
  const int64_t padded = 64;
  const std::vector<HfTensor> hf = LlamaTensors(d);
  const std::string src = TempDir("pv_src"), ckpt = TempDir("pv_ckpt"), out = TempDir("pv_out");
  HfWriteOptions wo;
  wo.config_json = LlamaConfig(d);
  Result<DescribedModel> model = WriteAndDescribe(src, hf, wo, "rules/llama.json");
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  const HfMapping& mapping = model->mapping;
  std::vector<HfKeyInfo>& infos = model->infos;
  int vocab_keys = 0;
  for (HfKeyInfo& info : infos) {
    if (info.split == "vocab") info.shape[0] = padded, ++vocab_keys;
  }
  ASSERT_EQ(vocab_keys, 2);

  const int tp = 2;
  std::vector<Status> st = RunThreadRanks(tp, [&](Comm& comm) -> Status {
    SP_ASSIGN_OR_RETURN(RankModel rm, BuildRank(infos, d.layers, comm.rank(), tp, 0, 1));
    HfLoadOptions lo;
    lo.load.allow_shape_mismatch = true;
    SP_ASSIGN_OR_RETURN(LoadResult lr, LoadFromHf(rm.state, src, mapping, comm, lo));
    (void)lr;
    for (size_t i = 0; i < rm.infos.size(); ++i) {
      if (rm.infos[i].split != "vocab") continue;
      const std::string hf_name = rm.infos[i].hf[0];
      const int64_t rows = padded / tp, first = comm.rank() * rows;
      const int64_t real = std::max<int64_t>(0, std::min(d.vocab - first, rows));
      const std::string got = Bytes(rm.state.tensors[i]);
      const size_t row_bytes = d.hidden * sizeof(float);
      EXPECT_EQ(got.substr(0, real * row_bytes), Rows(Find(hf, hf_name), first, real))
          << rm.infos[i].key << " rank " << comm.rank();
      EXPECT_EQ(got.substr(real * row_bytes), std::string((rows - real) * row_bytes, '\0'))
          << rm.infos[i].key << " padding rank " << comm.rank();
    }
    return Save(rm.state, ckpt, comm).status();
  });
  for (const Status& s : st) ASSERT_TRUE(s.ok()) << s.ToString();

  ExportHfOptions eo;
  eo.variables = {
      {"num_attention_heads", d.heads}, {"num_key_value_heads", d.groups}, {"vocab_size", d.vocab}};
  Result<ExportHfStats> es = ExportHf(ckpt, out, mapping, eo);
  ASSERT_TRUE(es.ok()) << es.status().ToString();
  EXPECT_EQ(FileBytes(src + "/model.safetensors"), FileBytes(out + "/model.safetensors"));

  // A vocabulary larger than the checkpoint's rows is an error naming the key.
  eo.variables["vocab_size"] = padded + 1;
  es = ExportHf(ckpt, TempDir("pv_out2"), mapping, eo);
  ASSERT_FALSE(es.ok());
  EXPECT_EQ(es.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(es.status().message().find("key 'embedding.word_embeddings.weight' [64, 32]: "
                                       "\"rows\" vocab_size = 65 is more than the key has (64)"),
            std::string::npos)
      << es.status().ToString();
}

TEST(HfRoundTrip, OfflineConvertBothWays) {
  LlamaDims d;
  const std::vector<HfTensor> hf = LlamaTensors(d, DType::kBF16);
  const std::string src = TempDir("cv_src"), ckpt = TempDir("cv_ckpt"), out = TempDir("cv_out");
  HfWriteOptions wo;
  wo.config_json = LlamaConfig(d);
  Result<DescribedModel> model = WriteAndDescribe(src, hf, wo, "rules/llama.json");
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  const HfMapping& mapping = model->mapping;
  const std::vector<HfKeyInfo>& infos = model->infos;
  ExportHfOptions o;
  o.block_bytes = 700;  // several chunks per tensor
  Result<ExportHfStats> c = ConvertHfToShardpoint(src, ckpt, mapping, o);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  // The config travels in the metadata: no variables needed on export.
  Result<ExportHfStats> e = ExportHf(ckpt, out, mapping, o);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(FileBytes(src + "/model.safetensors"), FileBytes(out + "/model.safetensors"));
  EXPECT_FALSE(FileBytes(out + "/config.json").empty());
  // The converted checkpoint loads into another layout with the core Load.
  std::vector<Status> st = RunThreadRanks(2, [&](Comm& comm) -> Status {
    SP_ASSIGN_OR_RETURN(RankModel rm, BuildRank(infos, d.layers, comm.rank(), 2, 0, 1));
    SP_ASSIGN_OR_RETURN(LoadResult lr, Load(rm.state, ckpt, comm));
    (void)lr;
    return OkStatus();
  });
  for (const Status& s : st) ASSERT_TRUE(s.ok()) << s.ToString();
}

TEST(HfRoundTrip, QwenMoeExpertsTp2Ep2) {
  LlamaDims d;
  d.experts = 4;
  d.layers = 2;
  const std::vector<HfTensor> hf = LlamaTensors(d);
  const std::string src = TempDir("moe_src"), ckpt = TempDir("moe_ckpt"), out = TempDir("moe_out");
  HfWriteOptions wo;
  wo.config_json = LlamaConfig(d);
  wo.max_shard_size = 30000;
  Result<DescribedModel> model = WriteAndDescribe(src, hf, wo, "rules/qwen_moe.json");
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  const HfMapping& mapping = model->mapping;
  const std::vector<HfKeyInfo>& infos = model->infos;
  std::mutex mu;
  // 4 ranks: TP2 for everything, experts EP2 x expert-TP2.
  std::vector<Status> st = RunThreadRanks(4, [&](Comm& comm) -> Status {
    const int tp_rank = comm.rank() % 2, ep_rank = comm.rank() / 2;
    HfParallel ep;
    ep.ep_rank = ep_rank, ep.ep_size = 2;
    SP_ASSIGN_OR_RETURN(RankModel rm, BuildRank(infos, d.layers, tp_rank, 2, 0, 1, ep));
    SP_ASSIGN_OR_RETURN(LoadResult lr, LoadFromHf(rm.state, src, mapping, comm));
    (void)lr;
    for (size_t i = 0; i < rm.infos.size(); ++i) {
      const std::string& key = rm.infos[i].key;
      if (key.find("experts.linear_fc1.weight") == std::string::npos) continue;
      const std::string p = "model.layers." + std::to_string(LayerOf(key)) + ".mlp.experts.";
      const int64_t f = d.moe_ffn / 2;
      std::string want;
      for (int e = ep_rank * 2; e < ep_rank * 2 + 2; ++e) {
        want += Rows(Find(hf, p + std::to_string(e) + ".gate_proj.weight"), tp_rank * f, f);
        want += Rows(Find(hf, p + std::to_string(e) + ".up_proj.weight"), tp_rank * f, f);
      }
      std::lock_guard<std::mutex> lock(mu);
      EXPECT_EQ(Bytes(rm.state.tensors[i]), want) << key;
    }
    SP_ASSIGN_OR_RETURN(SaveStats ss, Save(rm.state, ckpt, comm));
    (void)ss;
    return OkStatus();
  });
  for (const Status& s : st) ASSERT_TRUE(s.ok()) << s.ToString();
  ExportHfOptions eo;
  eo.max_shard_size = wo.max_shard_size;
  eo.variables = {
      {"num_attention_heads", d.heads}, {"num_key_value_heads", d.groups}, {"vocab_size", d.vocab}};
  ASSERT_TRUE(ExportHf(ckpt, out, mapping, eo).ok());
  const std::vector<std::string> files = *DefaultStorage()->ListDir(src);
  for (const std::string& f : files) {
    if (f != "config.json") {
      EXPECT_EQ(FileBytes(src + "/" + f), FileBytes(out + "/" + f)) << f;
    }
  }
}

}  // namespace
}  // namespace shardpoint
