// LoadFromHf across MPI processes: rank 0 writes a small Llama-style HF model
// (several safetensors shards and model.safetensors.index.json, seeded random
// values), every rank loads its TP = np shards under the rules/llama.json
// mapping (vocab / column / row parallel, SwiGLU fc1 fused from gate + up, GQA
// QKV interleaved from q, k, v) and compares every byte with the slice it
// computes itself from the HF tensors. A rank other than 0 reads from storage
// only the bytes of its own shards; rank 0 reads those plus the headers. Keys
// requested by no rank, and a failure on one rank (a requested key the files
// lack, a rule naming an HF tensor the files lack, a read error), give the same
// typed error on every rank, without a hang.
// Run: mpirun --allow-run-as-root --oversubscribe -np 3 build-test/hf_load_check
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "shardpoint/hf.h"
#include "shardpoint/mpi_comm.h"
#include "src/io/fault_storage.h"
#include "tests/hf/hf_model.h"
#include "tests/mpi/mpi_test_main.h"
#include "tests/testing/counting_storage.h"

namespace shardpoint {
namespace {

using namespace hftest;
using ::shardpoint::testing::CountingStorage;
using ::testing::HasSubstr;

// Source bytes are RandomTensor's (each byte & 0x3f); loaded buffers start as
// this byte, so any byte a load fails to write stands out.
constexpr char kPoison = static_cast<char>(0xc5);

// Sizes divisible by 12, so that TP = 2, 3 and 4 all split them evenly: 12
// key/value groups of 2 query heads, ffn 36, vocab 48.
LlamaDims Dims(int layers) {
  LlamaDims d;
  d.layers = layers;
  d.hidden = 24;
  d.heads = 24;
  d.groups = 12;
  d.head_dim = 4;
  d.ffn = 36;
  d.vocab = 48;
  d.qkv_bias = true;
  return d;
}

// 3 unlayered keys, and per layer: qkv layer norm, weight and bias, proj, fc1
// layer norm and weight, fc2.
size_t NumKeys(const LlamaDims& d) { return 3 + 6 * d.layers + (d.qkv_bias ? d.layers : 0); }

// The seed of the model's values: SP_HF_SEED if set, else a constant; rank 0's
// choice is broadcast so every rank regenerates the same tensors.
uint32_t AgreedSeed(Comm& comm) {
  std::string seed = "20250611";
  if (const char* env = std::getenv("SP_HF_SEED")) seed = env;
  EXPECT_TRUE(comm.Broadcast(&seed, 0).ok());
  return static_cast<uint32_t>(std::stoul(seed));
}

std::vector<HfTensor> ModelTensors(const LlamaDims& d, DType dtype, uint32_t seed) {
  std::vector<HfTensor> ts = LlamaTensors(d, dtype);
  for (HfTensor& t : ts) t = RandomTensor(t.name, t.shape, t.dtype, seed);
  return ts;
}

// Bytes the HF headers make rank 0 read: every safetensors file's length
// prefix and JSON header, the index and config.json.
uint64_t HeaderBytes(const std::string& dir) {
  uint64_t total = 0;
  Result<std::vector<std::string>> files = DefaultStorage()->ListDir(dir);
  EXPECT_TRUE(files.ok()) << files.status().ToString();
  for (const std::string& f : files.ok() ? *files : std::vector<std::string>{}) {
    Result<std::string> bytes = DefaultStorage()->ReadFileToString(dir + "/" + f);
    EXPECT_TRUE(bytes.ok()) << bytes.status().ToString();
    if (!bytes.ok()) continue;
    if (f.size() > 12 && f.substr(f.size() - 12) == ".safetensors") {
      uint64_t n = 0;
      for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>((*bytes)[i]);
      total += 8 + n;
    } else {
      total += bytes->size();
    }
  }
  return total;
}

// An HF model written by rank 0 into a fresh directory shared with all ranks,
// removed by rank 0 when it goes out of scope (also after a failed ASSERT).
struct SharedModel {
  SharedModel(Comm& comm, const LlamaDims& d, DType dtype, uint64_t shard_bytes)
      : comm_(comm), dims(d) {
    const uint32_t seed = AgreedSeed(comm);
    tensors = ModelTensors(d, dtype, seed);
    Status written;
    if (comm.rank() == 0) {
      char tmpl[] = "/tmp/shardpoint_hf_mpi_XXXXXX";
      root = mkdtemp(tmpl) ? tmpl : "";
      HfWriteOptions wo;
      wo.max_shard_size = shard_bytes;
      wo.config_json = LlamaConfig(d);
      written =
          root.empty() ? InternalError("mkdtemp failed") : WriteHfModel(root + "/hf", tensors, wo);
    }
    EXPECT_TRUE(comm.Broadcast(&root, 0).ok());
    dir = root + "/hf";
    // Rank 0's failure fails every rank (no rank waits for a model never
    // written).
    Status agreed = AgreeOnStatus(comm, written);
    EXPECT_TRUE(agreed.ok()) << agreed.ToString();

    // Every rank regenerated the same values.
    std::string all;
    for (const HfTensor& t : tensors) all += t.name + t.bytes;
    std::vector<std::string> digests;
    EXPECT_TRUE(comm.AllGather(std::to_string(std::hash<std::string>()(all)), &digests).ok());
    for (size_t r = 0; r < digests.size(); ++r) {
      EXPECT_EQ(digests[r], digests[0]) << "rank " << r << " regenerated other values";
    }
  }
  SharedModel(const SharedModel&) = delete;
  SharedModel& operator=(const SharedModel&) = delete;
  ~SharedModel() {
    EXPECT_TRUE(comm_.Barrier().ok());  // no rank still reads it
    if (comm_.rank() == 0 && !root.empty()) {
      EXPECT_TRUE(DefaultStorage()->RemoveAll(root).ok());
      EXPECT_FALSE(*DefaultStorage()->Exists(root));
    }
  }

  Comm& comm_;
  std::string root;  // mkdtemp'd by rank 0
  std::string dir;   // the HF model: root + "/hf"
  LlamaDims dims;
  std::vector<HfTensor> tensors;  // regenerated on every rank from the seed
};

std::string Cols(const HfTensor& t, int64_t begin, int64_t n) {
  const int64_t es = static_cast<int64_t>(DTypeSize(t.dtype)), cols = t.shape.at(1);
  std::string out;
  for (int64_t r = 0; r < t.shape.at(0); ++r) {
    out += t.bytes.substr((r * cols + begin) * es, n * es);
  }
  return out;
}

// The bytes TP rank `r` of `n` holds of `key`, computed from the HF tensors
// alone (Megatron layout: vocab and column splits take rows, row splits take
// columns, fc1 is [gate_r; up_r], linear_qkv is q, k, v rows per group).
// Empty with a failure for a key it does not know.
std::string ExpectedShard(const std::vector<HfTensor>& hf, const LlamaDims& d,
                          const std::string& key, int r, int n) {
  if (key == "embedding.word_embeddings.weight") {
    return Rows(Find(hf, "model.embed_tokens.weight"), r * d.vocab / n, d.vocab / n);
  }
  if (key == "output_layer.weight") {
    return Rows(Find(hf, "lm_head.weight"), r * d.vocab / n, d.vocab / n);
  }
  if (key == "decoder.final_layernorm.weight") return Find(hf, "model.norm.weight").bytes;
  const std::string lp = "decoder.layers.";
  if (key.rfind(lp, 0) != 0) {
    ADD_FAILURE() << "unexpected key " << key;
    return "";
  }
  const size_t dot = key.find('.', lp.size());
  const std::string p = "model.layers." + key.substr(lp.size(), dot - lp.size()) + ".";
  const std::string rest = key.substr(dot + 1);
  const int64_t q = d.heads * d.head_dim;
  if (rest == "self_attention.linear_qkv.layer_norm_weight") {
    return Find(hf, p + "input_layernorm.weight").bytes;
  }
  if (rest == "self_attention.linear_qkv.weight" || rest == "self_attention.linear_qkv.bias") {
    const std::string w = rest.substr(rest.rfind('.') + 1);
    const int64_t hpg = d.heads / d.groups, hd = d.head_dim;
    std::string want;
    for (int64_t g = r * d.groups / n; g < (r + 1) * d.groups / n; ++g) {
      want += Rows(Find(hf, p + "self_attn.q_proj." + w), g * hpg * hd, hpg * hd);
      want += Rows(Find(hf, p + "self_attn.k_proj." + w), g * hd, hd);
      want += Rows(Find(hf, p + "self_attn.v_proj." + w), g * hd, hd);
    }
    return want;
  }
  if (rest == "self_attention.linear_proj.weight") {
    return Cols(Find(hf, p + "self_attn.o_proj.weight"), r * q / n, q / n);
  }
  if (rest == "mlp.linear_fc1.layer_norm_weight") {
    return Find(hf, p + "post_attention_layernorm.weight").bytes;
  }
  if (rest == "mlp.linear_fc1.weight") {
    const int64_t f = d.ffn / n;
    return Rows(Find(hf, p + "mlp.gate_proj.weight"), r * f, f) +
           Rows(Find(hf, p + "mlp.up_proj.weight"), r * f, f);
  }
  if (rest == "mlp.linear_fc2.weight") {
    return Cols(Find(hf, p + "mlp.down_proj.weight"), r * d.ffn / n, d.ffn / n);
  }
  ADD_FAILURE() << "unexpected key " << key;
  return "";
}

// A rank's local tensors, each in its own poisoned buffer.
struct RankState {
  State state;
  std::vector<std::string> keys;  // parallel to state.tensors
  std::vector<std::unique_ptr<std::string>> buffers;

  Status Add(const HfKeyInfo& info, const HfParallel& p) {
    SP_ASSIGN_OR_RETURN(LocalTensor lt, HfShard(info, info.dtype, nullptr, p));
    int64_t n = 1;
    for (int64_t s : lt.shape) n *= s;
    buffers.push_back(std::make_unique<std::string>(n * DTypeSize(info.dtype), kPoison));
    lt.data = buffers.back()->data();
    state.tensors.push_back(std::move(lt));
    keys.push_back(info.key);
    return OkStatus();
  }
  uint64_t HeldBytes() const {
    uint64_t total = 0;
    for (const auto& b : buffers) total += b->size();
    return total;
  }
};

Result<HfMapping> LlamaMapping() { return ReadHfMapping(RepoPath("rules/llama.json")); }

// All ranks' strings, for checks that every rank saw the same thing.
std::vector<std::string> Gathered(Comm& comm, const std::string& mine) {
  std::vector<std::string> all;
  EXPECT_TRUE(comm.AllGather(mine, &all).ok());
  return all;
}

class HfLoadMpi : public ::testing::TestWithParam<DType> {};

TEST_P(HfLoadMpi, TpShardsBitExactAndOnlyOwnBytesRead) {
  auto world = MakeMpiComm(MPI_COMM_WORLD);
  ASSERT_NE(world, nullptr);
  const int n = world->size(), rank = world->rank();
  // f32: about 126 KB in 6 files; bf16: half of it in 3.
  SharedModel model(*world, Dims(3), GetParam(), 25000);
  const LlamaDims& d = model.dims;

  Result<std::vector<std::string>> files = DefaultStorage()->ListDir(model.dir);
  ASSERT_TRUE(files.ok()) << files.status().ToString();
  int shards = 0;
  for (const std::string& f : *files) shards += f.rfind("model-", 0) == 0;
  EXPECT_GE(shards, 2);
  EXPECT_EQ(std::count(files->begin(), files->end(), "model.safetensors.index.json"), 1);
  EXPECT_EQ(std::count(files->begin(), files->end(), "config.json"), 1);

  Result<HfMapping> mapping = LlamaMapping();
  ASSERT_TRUE(mapping.ok()) << mapping.status().ToString();
  Result<std::vector<HfKeyInfo>> infos = DescribeHf(model.dir, *mapping);
  ASSERT_TRUE(infos.ok()) << infos.status().ToString();
  ASSERT_EQ(infos->size(), NumKeys(d));

  RankState rs;
  for (const HfKeyInfo& info : *infos) {
    Status s = rs.Add(info, HfParallel{rank, n});
    ASSERT_TRUE(s.ok()) << info.key << ": " << s.ToString();
  }
  CountingStorage counting(DefaultStorage());
  HfLoadOptions o;
  o.load.storage = &counting;
  o.load.io_threads = 2;
  Result<LoadResult> r = LoadFromHf(rs.state, model.dir, *mapping, *world, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->missing_keys.empty());
  EXPECT_TRUE(r->unexpected_keys.empty());
  EXPECT_EQ(r->bytes_received, 0u);

  for (size_t i = 0; i < rs.keys.size(); ++i) {
    const std::string want = ExpectedShard(model.tensors, d, rs.keys[i], rank, n);
    EXPECT_FALSE(want.empty()) << rs.keys[i];
    EXPECT_EQ(rs.buffers[i]->size(), want.size()) << rs.keys[i];
    EXPECT_TRUE(*rs.buffers[i] == want) << rs.keys[i] << " differs on rank " << rank;
  }

  // Only this rank's runs are read: exactly its bytes as counted by the load,
  // and from storage too, plus the headers on rank 0.
  const uint64_t held = rs.HeldBytes();
  EXPECT_EQ(r->bytes_read, held);
  if (rank == 0) {
    EXPECT_GE(counting.bytes.load(), held);
    EXPECT_LE(counting.bytes.load(), held + HeaderBytes(model.dir));
  } else {
    EXPECT_EQ(counting.bytes.load(), held) << "rank " << rank << " read more than its shards";
  }
  // Split keys are read once in all; replicated ones (norms) once per rank.
  uint64_t split = 0, replicated = 0;
  for (const HfTensor& t : model.tensors) {
    (t.name.find("norm") != std::string::npos ? replicated : split) += t.bytes.size();
  }
  uint64_t total = 0;
  for (const std::string& b : Gathered(*world, std::to_string(r->bytes_read))) {
    total += std::stoull(b);
  }
  EXPECT_EQ(total, split + n * replicated);

  // Cooperative (opted in; HF loads run Load's pipeline): the same bytes, but
  // each needed byte is read by one rank and sent to the others needing it.
  RankState co;
  for (const HfKeyInfo& info : *infos) ASSERT_TRUE(co.Add(info, HfParallel{rank, n}).ok());
  HfLoadOptions oc;
  oc.load.cooperative = true;
  oc.load.io_threads = 2;
  oc.load.read_slice_bytes = 4096;
  r = LoadFromHf(co.state, model.dir, *mapping, *world, oc);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  for (size_t i = 0; i < co.keys.size(); ++i) {
    EXPECT_TRUE(*co.buffers[i] == *rs.buffers[i]) << co.keys[i] << " differs on rank " << rank;
  }
  uint64_t read = 0, received = 0;
  for (const std::string& b : Gathered(*world, std::to_string(r->bytes_read))) {
    read += std::stoull(b);
  }
  for (const std::string& b : Gathered(*world, std::to_string(r->bytes_received))) {
    received += std::stoull(b);
  }
  // Each needed byte is read once in all; a rank reads the needed bytes of
  // its 1 MiB units for every rank that needs them and sends them the parts:
  // at least the other ranks' copies of the replicated tensors.
  EXPECT_EQ(read, split + replicated);
  EXPECT_GE(received, (n - 1) * replicated);
  EXPECT_LE(received, (n - 1) * replicated + split);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, HfLoadMpi, ::testing::Values(DType::kF32, DType::kBF16),
                         [](const ::testing::TestParamInfo<DType>& i) {
                           return std::string(DTypeName(i.param));
                         });

// TP = 1, one layer per rank (rank 0 also the embedding, the last rank the
// output layer and final norm), layer np requested by no rank: an error on
// every rank, unless allowed, then reported on every rank.
TEST(HfLoadMpiStages, LayersSplitOverRanksAndUnrequestedLayer) {
  auto world = MakeMpiComm(MPI_COMM_WORLD);
  ASSERT_NE(world, nullptr);
  const int n = world->size(), rank = world->rank();
  SharedModel model(*world, Dims(n + 1), DType::kF32, 20000);
  const LlamaDims& d = model.dims;
  Result<HfMapping> mapping = LlamaMapping();
  ASSERT_TRUE(mapping.ok()) << mapping.status().ToString();
  Result<std::vector<HfKeyInfo>> infos = DescribeHf(model.dir, *mapping);
  ASSERT_TRUE(infos.ok()) << infos.status().ToString();

  const std::string unheld = "decoder.layers." + std::to_string(n) + ".";
  std::vector<std::string> unrequested;
  auto build = [&] {
    RankState rs;
    unrequested.clear();
    for (const HfKeyInfo& info : *infos) {
      bool mine = false;
      if (info.key.rfind(unheld, 0) == 0) {
        unrequested.push_back(info.key);
      } else if (info.key.rfind("decoder.layers." + std::to_string(rank) + ".", 0) == 0) {
        mine = true;
      } else if (info.key.rfind("decoder.layers.", 0) != 0) {
        mine = info.key.rfind("embedding.", 0) == 0 ? rank == 0 : rank == n - 1;
      }
      if (mine) {
        EXPECT_TRUE(rs.Add(info, HfParallel{}).ok()) << info.key;
      }
    }
    std::sort(unrequested.begin(), unrequested.end());
    return rs;
  };

  RankState rs = build();
  Result<LoadResult> r = LoadFromHf(rs.state, model.dir, *mapping, *world);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("no rank requested"));
  EXPECT_THAT(r.status().message(), HasSubstr("'" + unheld + "mlp.linear_fc1.weight'"));
  for (const std::string& m : Gathered(*world, r.status().ToString())) {
    EXPECT_EQ(m, r.status().ToString());
  }
  for (const auto& b : rs.buffers) EXPECT_EQ(*b, std::string(b->size(), kPoison));

  rs = build();
  HfLoadOptions o;
  o.load.allow_unexpected_keys = true;
  r = LoadFromHf(rs.state, model.dir, *mapping, *world, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(unrequested.size(), (NumKeys(d) - 3) / d.layers);  // one layer's keys
  EXPECT_EQ(r->unexpected_keys, unrequested);
  EXPECT_TRUE(r->missing_keys.empty());
  EXPECT_EQ(r->bytes_read, rs.HeldBytes());
  EXPECT_FALSE(rs.keys.empty());
  for (size_t i = 0; i < rs.keys.size(); ++i) {
    EXPECT_TRUE(*rs.buffers[i] == ExpectedShard(model.tensors, d, rs.keys[i], 0, 1))
        << rs.keys[i] << " differs on rank " << rank;
  }
}

// Failures on one rank fail every rank with that rank's typed error.
TEST(HfLoadMpiErrors, OneRankFailureIsEveryRanksError) {
  auto world = MakeMpiComm(MPI_COMM_WORLD);
  ASSERT_NE(world, nullptr);
  const int n = world->size(), rank = world->rank(), last = n - 1;
  const std::string prefix = "rank " + std::to_string(last) + ": ";
  SharedModel model(*world, Dims(2), DType::kF32, 20000);
  const LlamaDims& d = model.dims;
  Result<HfMapping> llama = LlamaMapping();
  ASSERT_TRUE(llama.ok()) << llama.status().ToString();
  Result<std::vector<HfKeyInfo>> infos = DescribeHf(model.dir, *llama);
  ASSERT_TRUE(infos.ok()) << infos.status().ToString();
  auto build = [&] {
    RankState rs;
    for (const HfKeyInfo& info : *infos) EXPECT_TRUE(rs.Add(info, HfParallel{rank, n}).ok());
    return rs;
  };
  auto same_everywhere = [&](const Status& s) {
    for (const std::string& m : Gathered(*world, s.ToString())) EXPECT_EQ(m, s.ToString());
  };

  // 1. A rule for an HF tensor the files lack (a MoE router in a dense
  //    model) makes no key; only the last rank requests that key.
  HfMapping mapping = *llama;
  HfRule router;
  router.sp = "decoder.layers.{layer}.mlp.router.weight";
  router.hf = {"model.layers.{layer}.mlp.gate.weight"};
  mapping.rules.push_back(router);
  const std::string absent = "decoder.layers.1.mlp.router.weight";
  HfKeyInfo router_info;
  router_info.key = absent;
  router_info.shape = {4, d.hidden};
  router_info.split = "replicated";
  {
    RankState rs = build();
    if (rank == last) {
      EXPECT_TRUE(rs.Add(router_info, HfParallel{}).ok());
    }
    CountingStorage counting(DefaultStorage());
    HfLoadOptions o;
    o.load.storage = &counting;
    Result<LoadResult> r = LoadFromHf(rs.state, model.dir, mapping, *world, o);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kNotFound) << r.status().ToString();
    // Missing keys are gathered from every rank (one error naming all of
    // them, with the unexpected ones), so every rank reports the same error.
    EXPECT_THAT(r.status().message(), HasSubstr("'" + absent + "'"));
    same_everywhere(r.status());
    // Nothing but the headers was read (by rank 0), nothing written.
    EXPECT_LE(counting.bytes.load(), rank == 0 ? HeaderBytes(model.dir) : 0u);
    for (const auto& b : rs.buffers) EXPECT_EQ(*b, std::string(b->size(), kPoison));
  }

  // 2. Allowed, the key is reported missing on its rank only and left as it
  //    was; everything else loads.
  {
    RankState rs = build();
    if (rank == last) {
      EXPECT_TRUE(rs.Add(router_info, HfParallel{}).ok());
    }
    HfLoadOptions o;
    o.load.allow_missing_keys = true;
    Result<LoadResult> r = LoadFromHf(rs.state, model.dir, mapping, *world, o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->missing_keys,
              rank == last ? std::vector<std::string>{absent} : std::vector<std::string>{});
    for (size_t i = 0; i < rs.keys.size(); ++i) {
      if (rs.keys[i] == absent) {
        EXPECT_EQ(*rs.buffers[i], std::string(rs.buffers[i]->size(), kPoison));
      } else {
        EXPECT_TRUE(*rs.buffers[i] == ExpectedShard(model.tensors, d, rs.keys[i], rank, n))
            << rs.keys[i];
      }
    }
  }

  // 3. The last rank's mapping points fc1 at gate / up tensors the files
  //    lack: gate_proj and up_proj match no rule of its (strict) mapping.
  {
    RankState rs = build();
    HfMapping bad = *llama;
    if (rank == last) {
      for (HfRule& rule : bad.rules) {
        if (rule.sp.find("linear_fc1.weight") == std::string::npos) continue;
        for (std::string& h : rule.hf) h.insert(h.find("_proj.weight"), "_missing");
      }
    }
    Result<LoadResult> r = LoadFromHf(rs.state, model.dir, bad, *world);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().ToString();
    EXPECT_THAT(r.status().message(), HasSubstr(prefix));
    EXPECT_THAT(r.status().message(),
                HasSubstr("matches HF tensor 'model.layers.0.mlp.gate_proj.weight'"));
    same_everywhere(r.status());
    for (const auto& b : rs.buffers) EXPECT_EQ(*b, std::string(b->size(), kPoison));
  }

  // 4. The last rank's disk fails on its first data read.
  {
    RankState rs = build();
    internal_io::FaultStorage faults(DefaultStorage());
    if (rank == last) faults.FailReadsFrom(1);
    HfLoadOptions o;
    o.load.storage = &faults;
    Result<LoadResult> r = LoadFromHf(rs.state, model.dir, *llama, *world, o);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kIOError) << r.status().ToString();
    EXPECT_THAT(r.status().message(), HasSubstr(prefix));
    EXPECT_THAT(r.status().message(), HasSubstr("(injected)"));
    same_everywhere(r.status());
  }

  // 5. No model there: rank 0's error, on every rank.
  {
    RankState rs = build();
    Result<LoadResult> r = LoadFromHf(rs.state, model.root + "/none", *llama, *world);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kNotFound) << r.status().ToString();
    EXPECT_THAT(r.status().message(), HasSubstr("rank 0: "));
    same_everywhere(r.status());
  }
}

}  // namespace
}  // namespace shardpoint

int main(int argc, char** argv) {
  return shardpoint::testing::RunMpiTests(argc, argv, "hf_load_check");
}
