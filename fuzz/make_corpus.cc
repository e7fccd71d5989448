// Writes the seed inputs of fuzz/corpus/ from real encodings: a small
// two-rank checkpoint (its manifest and data files), an HF model directory
// (its header blob, index.json and config.json), a save-plan contribution,
// an all-to-all exchange and a sharded manifest's index in versions 3 to 6.
// Not built by default:
//
//   cmake --build build-test --target fuzz_make_corpus
//   build-test/fuzz/fuzz_make_corpus fuzz/corpus
//
// The mapping seeds are copies of rules/*.json; the malformed seeds beside them (names starting
// "bad_") are written by hand.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "shardpoint/checkpoint.h"
#include "shardpoint/hf.h"
#include "src/format/manifest_index.h"
#include "src/plan/save_plan.h"
#include "src/source/hf_dir.h"

namespace sp = shardpoint;
namespace fs = std::filesystem;

namespace {

void Put(const fs::path& dir, const std::string& name, const std::string& bytes) {
  fs::create_directories(dir);
  std::ofstream(dir / name, std::ios::binary) << bytes;
}

std::string Slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void Check(const sp::Status& s) {
  if (!s.ok()) {
    std::fprintf(stderr, "make_corpus: %s\n", s.ToString().c_str());
    std::exit(1);
  }
}

void PutLE(std::string* out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>(v >> (8 * i)));
}

void Checkpoint(const fs::path& out, const fs::path& tmp) {
  const fs::path dir = tmp / "ckpt";
  std::vector<float> w(6 * 4), b(4);
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i) * 0.5f;
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(i);
  std::vector<sp::Status> st = sp::RunThreadRanks(2, [&](sp::Comm& comm) {
    int r = comm.rank();
    sp::State s;
    sp::LocalTensor t;
    t.dtype = sp::DType::kF32;
    t.data = w.data() + r * 12;
    t.shape = {3, 4};
    t.segments = {{"layer.weight", {6, 4}, sp::Box{{3 * r, 0}, {3, 4}}, {0, 0}}};
    s.tensors.push_back(t);
    sp::LocalTensor bias;
    bias.dtype = sp::DType::kF32;
    bias.data = b.data();
    bias.shape = {4};
    bias.segments = {{"layer.bias", {4}, sp::Box{{0}, {4}}, {0}}};
    s.tensors.push_back(bias);
    s.objects.push_back({"rng", std::string(8, static_cast<char>('a' + r)), {r}, {2}});
    s.common = "iteration 7";
    s.metadata_json = R"({"step": 7})";
    sp::SaveOptions o;
    o.overwrite = true;
    return sp::Save(s, dir.string(), comm, o).status();
  });
  for (const sp::Status& s : st) Check(s);
  Put(out / "manifest", "manifest", Slurp(dir / "manifest"));
  int i = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_regular_file() && e.path().extension() == ".safetensors") {
      Put(out / "safetensors", "data_" + std::to_string(i++), Slurp(e.path()));
    }
  }
}

void HfModel(const fs::path& out, const fs::path& tmp) {
  const fs::path dir = tmp / "hf";
  std::vector<sp::HfTensor> t;
  for (const char* name : {"model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight",
                           "model.layers.0.self_attn.k_proj.weight", "lm_head.weight"}) {
    t.push_back({name, sp::DType::kF32, {4, 2}, std::string(32, '\x01')});
  }
  const std::string config =
      R"({"vocab_size": 4, "num_attention_heads": 2, "num_key_value_heads": 1, "hidden_size": 2})";
  sp::HfWriteOptions o;
  o.max_shard_size = 64;  // several files and an index
  o.config_json = config;
  Check(sp::WriteHfModel(dir.string(), t, o));
  sp::Result<std::string> blob =
      sp::internal_source::ReadHfHeaders(sp::DefaultStorage(), dir.string());
  Check(blob.status());
  Put(out / "hf_headers", "blob", "\x01" + *blob);  // odd first byte: the whole blob
  Put(out / "hf_headers", "index", "\x00" + Slurp(dir / sp::internal_hf::kHfIndexName));
  Put(out / "hf_config", "config", config);
  Put(out / "safetensors", "hf_file", Slurp(dir / "model-00001-of-00002.safetensors"));
}

void Contribution(const fs::path& out) {
  sp::internal_plan::Contribution c;
  c.regions.push_back({"layer.weight", sp::DType::kF32, {6, 4}, sp::Box{{3, 0}, {3, 4}}});
  c.regions.push_back({"layer.bias", sp::DType::kBF16, {4}, sp::Box{{0}, {4}}});
  c.regions.push_back({"empty", sp::DType::kF32, {0, 4}, sp::Box{}});
  c.objects.push_back({"rng", {1}, {2}, 8});
  c.objects.push_back({"opt", {}, {}, 100});
  Put(out / "contribution", "two_regions", sp::internal_plan::EncodeContribution(c));
}

void AllToAll(const fs::path& out) {
  // Two cut bytes, then what ranks 1 and 2 gathered: each rank's payloads
  // for ranks 0..2 as u32-length strings.
  std::string r1, r2;
  for (const char* p : {"from1to0", "from1to1", "x"}) {
    PutLE(&r1, std::strlen(p), 4);
    r1 += p;
  }
  for (const char* p : {"", "from2to1", "from2to2"}) {
    PutLE(&r2, std::strlen(p), 4);
    r2 += p;
  }
  std::string in;
  in.push_back(static_cast<char>(r1.size()));
  in.push_back(static_cast<char>(r2.size()));
  Put(out / "all_to_all", "three_ranks", in + r1 + r2);
}

// A manifest of two tensors (one cut into parts) and the RNG objects of 40
// ranks, split into small shards, its index written in versions 3, 4 and 5,
// and in version 6 as two owners' indexes combined (two shard files).
void ManifestIndex(const fs::path& out) {
  namespace fmt = sp::internal_format;
  fmt::Manifest m;
  m.files = {"data/0.safetensors", "data/1.safetensors"};
  fmt::TensorRecord big{"layers.0.w", sp::DType::kBF16, {40, 8}, {}};
  for (int64_t r = 0; r < 40; r += 4) {
    fmt::ChunkRecord c;
    c.box = sp::Box{{r, 0}, {4, 8}};
    c.file = static_cast<uint32_t>(r / 20);
    c.offset = static_cast<uint64_t>(r) * 16;
    c.nbytes = 64;
    c.checksum = 1000 + static_cast<uint64_t>(r);
    c.block_sums = {c.checksum};
    big.chunks.push_back(c);
  }
  m.tensors.push_back(big);
  fmt::TensorRecord small{"layers.0.b", sp::DType::kF32, {8}, {}};
  fmt::ChunkRecord c;
  c.box = sp::Box{{0}, {8}};
  c.nbytes = 32;
  c.checksum = 7;
  c.block_sums = {7};
  small.chunks.push_back(c);
  m.tensors.insert(m.tensors.begin(), small);
  for (int64_t r = 0; r < 40; ++r) {
    m.objects.push_back({"rng",
                         {r},
                         {40},
                         static_cast<uint32_t>(r % 2),
                         uint64_t(8 * r),
                         8,
                         static_cast<uint64_t>(r)});
  }
  m.objects.push_back({"step", {}, {}, 0, 400, 8, 3});
  m.metadata_json = R"({"step": 7})";
  fmt::SplitResult split = fmt::SplitManifest(m, 400, 200);
  {
    // Owner 0 the tensors and the even RNG states, owner 3 the rest.
    fmt::Manifest part[2];
    for (fmt::Manifest& p : part) p.files = m.files;
    part[0].tensors = m.tensors;
    for (const fmt::ObjectRecord& o : m.objects) {
      part[o.index.empty() || o.index[0] % 2 ? 1 : 0].objects.push_back(o);
    }
    sp::Result<fmt::ManifestIndex> v6 =
        fmt::CombineIndexes({fmt::SplitManifest(part[0], 400, 200, 0).index,
                             fmt::SplitManifest(part[1], 400, 200, 3).index});
    if (!v6.ok()) std::abort();
    v6->metadata_json = m.metadata_json;
    Put(out / "manifest_index", "v6", fmt::EncodeIndex(*v6));
  }
  split.index.version = fmt::kIndexVersionV5;
  Put(out / "manifest_index", "v5", fmt::EncodeIndex(split.index));
  split.index.version = fmt::kIndexVersionV4;
  Put(out / "manifest_index", "v4", fmt::EncodeIndex(split.index));
  split = fmt::SplitManifest(m, 400, uint64_t{1} << 30);  // one part a record
  split.index.version = fmt::kIndexVersionV3;
  Put(out / "manifest_index", "v3", fmt::EncodeIndex(split.index));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: fuzz_make_corpus <fuzz/corpus>\n");
    return 2;
  }
  const fs::path out(argv[1]);
  const fs::path tmp = fs::temp_directory_path() / ("sp_corpus_" + std::to_string(getpid()));
  Checkpoint(out, tmp);
  HfModel(out, tmp);
  Contribution(out);
  AllToAll(out);
  ManifestIndex(out);
  fs::remove_all(tmp);
  return 0;
}
