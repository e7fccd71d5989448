// `shardpoint inspect | verify | convert` on a PyTorch DCP directory (the
// committed torch 1.13 fixture), end to end through the binary, and VerifyDcp
// on damaged copies.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <map>

#include "shardpoint/checkpoint.h"
#include "shardpoint/comm.h"
#include "shardpoint/hf.h"
#include "shardpoint/layout.h"
#include "src/checkpoint/verify_dcp.h"
#include "src/dcp/dcp_dir.h"
#include "tests/testing/run_command.h"

using shardpoint::internal_checkpoint::VerifyDcp;
using shardpoint::internal_dcp::DcpIndex;
using shardpoint::internal_dcp::ReadDcpIndex;
using shardpoint::internal_format::ChunkRecord;
using shardpoint::internal_format::TensorRecord;

#ifndef SP_CLI_PATH
#error "SP_CLI_PATH (the shardpoint binary) must be defined by the build"
#endif

namespace shardpoint {
namespace {

using ::testing::HasSubstr;

std::string Fixture() {
  std::string f = __FILE__;
  std::string dir = f.substr(0, f.rfind("/tests/dcp/")) + "/tests/dcp/fixtures/torch113_2ranks";
  Result<bool> here = DefaultStorage()->Exists(dir + "/.metadata");
  if (!here.ok() || !*here) dir = "tests/dcp/fixtures/torch113_2ranks";
  return std::filesystem::absolute(dir).string();
}

using CliRun = ::shardpoint::testing::CommandResult;

CliRun RunCli(const std::string& args) {
  return ::shardpoint::testing::RunCommand(std::string(SP_CLI_PATH) + " " + args + " 2>&1");
}

// A copy of the fixture in a temporary directory.
std::string CopyFixture(const std::string& name) {
  const std::string dir =
      ::testing::TempDir() + "sp_dcp_" + name + "_" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::copy(Fixture(), dir);
  return dir;
}

TEST(DcpCliTest, InspectListsTensorsAndSaysNoChecksums) {
  CliRun r = RunCli("inspect " + Fixture());
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("w"));
  EXPECT_THAT(r.out, HasSubstr("idx"));
  EXPECT_THAT(r.out, HasSubstr("PyTorch DCP checkpoint (no checksums)"));
}

TEST(DcpCliTest, VerifyCleanIsOk) {
  CliRun r = RunCli("verify " + Fixture());
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("DCP stores no checksums"));
  EXPECT_THAT(r.out, HasSubstr("OK"));
}

TEST(DcpCliTest, VerifyNamesTheChunkOfAFlippedByte) {
  const std::string dir = CopyFixture("flip");
  Result<DcpIndex> idx = ReadDcpIndex(DefaultStorage(), dir);
  ASSERT_TRUE(idx.ok()) << idx.status().ToString();
  const TensorRecord& w = idx->m.tensors[idx->m.FindTensor("w")];
  const ChunkRecord& c = w.chunks[1];
  const std::string path = dir + "/" + idx->m.files[c.file];
  Result<std::string> bytes = DefaultStorage()->ReadFileToString(path);
  ASSERT_TRUE(bytes.ok());
  (*bytes)[c.offset + 5] ^= 0x10;
  ASSERT_TRUE(DefaultStorage()->WriteStringToFile(path, *bytes).ok());
  CliRun r = RunCli("verify " + dir);
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_THAT(r.out, HasSubstr("'w' chunk [3:5, 0:3]: CRC-32 mismatch"));
  std::filesystem::remove_all(dir);
}

TEST(DcpCliTest, VerifyReportsAnUncoveredTensor) {
  const std::string dir = CopyFixture("gap");
  std::filesystem::remove(dir + "/__1_0.distcp");
  Result<internal_checkpoint::VerifyReport> r = VerifyDcp(DefaultStorage(), dir);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->faults.size(), 1u);
  EXPECT_THAT(r->faults[0].message, HasSubstr("__1_0.distcp"));
  std::filesystem::remove_all(dir);
}

TEST(DcpCliTest, ConvertToShardpointThenLoadBitForBit) {
  const std::string out = ::testing::TempDir() + "sp_dcp_conv_" + std::to_string(::getpid());
  std::filesystem::remove_all(out);
  CliRun r = RunCli("convert " + Fixture() + " " + out);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  CliRun v = RunCli("verify " + out);
  EXPECT_EQ(v.exit_code, 0) << v.out;
  std::vector<float> w(15);
  State st;
  LocalTensor t;
  t.dtype = DType::kF32;
  t.shape = {5, 3};
  t.data = w.data();
  t.segments.push_back({"w", {5, 3}, Box::Whole({5, 3}), {0, 0}});
  st.tensors.push_back(t);
  std::unique_ptr<Comm> comm = MakeSingleComm();
  LoadOptions o;
  o.allow_unexpected_keys = true;
  Result<LoadResult> lr = Load(st, out, *comm, o);
  ASSERT_TRUE(lr.ok()) << lr.status().ToString();
  for (int i = 0; i < 15; ++i) EXPECT_EQ(w[i], static_cast<float>(i));
  std::filesystem::remove_all(out);
}

// DCP -> DCP through the CLI: the written directory verifies (structure,
// coverage, every CRC-32), loads bit for bit with its byte item as stored,
// and a second run to the same destination is refused, naming it.
TEST(DcpCliTest, ConvertToDcpVerifiesLoadsAndRefusesAnExistingDestination) {
  const std::string out = ::testing::TempDir() + "sp_dcp_todcp_" + std::to_string(::getpid());
  std::filesystem::remove_all(out);
  CliRun r = RunCli("convert --to dcp " + Fixture() + " " + out);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("(PyTorch DCP) -> " + out + " (PyTorch DCP): 3 tensors"));
  CliRun v = RunCli("verify " + out);
  EXPECT_EQ(v.exit_code, 0) << v.out;
  auto load = [](const std::string& dir, std::vector<float>* w, std::string* blob) {
    State st;
    LocalTensor t;
    t.dtype = DType::kF32;
    t.shape = {5, 3};
    t.data = w->data();
    t.segments.push_back({"w", {5, 3}, Box::Whole({5, 3}), {0, 0}});
    st.tensors.push_back(t);
    st.objects.push_back({"blob", "", {}, {}});
    std::unique_ptr<Comm> comm = MakeSingleComm();
    LoadOptions o;
    o.allow_unexpected_keys = true;
    Result<LoadResult> lr = Load(st, dir, *comm, o);
    *blob = st.objects[0].bytes;
    return lr.status();
  };
  std::vector<float> w(15), w0(15);
  std::string blob, blob0;
  ASSERT_TRUE(load(out, &w, &blob).ok());
  ASSERT_TRUE(load(Fixture(), &w0, &blob0).ok());
  for (int i = 0; i < 15; ++i) EXPECT_EQ(w[i], static_cast<float>(i));
  EXPECT_EQ(blob, blob0);
  EXPECT_FALSE(blob.empty());

  CliRun again = RunCli("convert --to dcp " + Fixture() + " " + out);
  EXPECT_EQ(again.exit_code, 2) << again.out;
  EXPECT_THAT(again.out, HasSubstr("'" + out + "' exists"));
  std::filesystem::remove_all(out);
}

// --torch picks whose class paths .metadata names: torch 2.x by default,
// torch 1.13 on request (each torch reads only its own); anything else is a
// usage error.
TEST(DcpCliTest, ConvertToDcpWritesForTheTorchAskedFor) {
  const std::string out = ::testing::TempDir() + "sp_dcp_torch_" + std::to_string(::getpid());
  for (const auto& [flag, major] :
       std::vector<std::pair<std::string, int>>{{"", 2}, {" --torch 2", 2}, {" --torch 1.13", 1}}) {
    SCOPED_TRACE(flag);
    std::filesystem::remove_all(out);
    CliRun r = RunCli("convert --to dcp" + flag + " " + Fixture() + " " + out);
    ASSERT_EQ(r.exit_code, 0) << r.out;
    Result<DcpIndex> idx = ReadDcpIndex(DefaultStorage(), out);
    ASSERT_TRUE(idx.ok()) << idx.status().ToString();
    EXPECT_EQ(idx->metadata.torch_major, major);
  }
  std::filesystem::remove_all(out);
  CliRun bad = RunCli("convert --to dcp --torch 3 " + Fixture() + " " + out);
  EXPECT_EQ(bad.exit_code, 2) << bad.out;
  EXPECT_THAT(bad.out, HasSubstr("--torch"));
  EXPECT_FALSE(std::filesystem::exists(out));
}

// export-hf from DCP writes the fixture's values (checked through the HF
// loader, not through the DCP reader that wrote them), and diff says the
// DCP directory and the export are equal.
TEST(DcpCliTest, ExportHfWritesTheValuesAndDiffSaysEqual) {
  const std::string out = ::testing::TempDir() + "sp_dcp_hf_" + std::to_string(::getpid());
  std::filesystem::remove_all(out);
  CliRun r = RunCli("export-hf " + Fixture() + " " + out);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("3 tensors"));
  std::vector<float> w(15);
  std::vector<int64_t> idx(4);
  std::vector<uint16_t> b(4);
  State st;
  auto add = [&st](const std::string& key, DType d, const Shape& shape, void* data) {
    LocalTensor t;
    t.dtype = d;
    t.shape = shape;
    t.data = data;
    t.segments.push_back({key, shape, Box::Whole(shape), Shape(shape.size(), 0)});
    st.tensors.push_back(t);
  };
  add("w", DType::kF32, {5, 3}, w.data());
  add("idx", DType::kI64, {2, 2}, idx.data());
  add("b", DType::kBF16, {4}, b.data());
  std::unique_ptr<Comm> comm = MakeSingleComm();
  Result<LoadResult> lr = LoadFromHf(st, out, IdentityHfMapping(), *comm);
  ASSERT_TRUE(lr.ok()) << lr.status().ToString();
  for (int i = 0; i < 15; ++i) EXPECT_EQ(w[i], static_cast<float>(i));
  for (int k = 0; k < 4; ++k) EXPECT_EQ(idx[k], 10 + k);
  // bf16 of 0.5 k: 0, 0.5, 1, 1.5.
  EXPECT_EQ(b, (std::vector<uint16_t>{0x0000, 0x3f00, 0x3f80, 0x3fc0}));

  CliRun d = RunCli("diff " + Fixture() + " " + out);
  EXPECT_EQ(d.exit_code, 0) << d.out;
  EXPECT_THAT(d.out, HasSubstr("EQUAL: 3 tensors"));
  std::filesystem::remove_all(out);
}

// diff between two DCP directories names the tensor with a flipped data
// byte; a missing .distcp file is an error naming it, for diff and export-hf.
TEST(DcpCliTest, DiffNamesAFlippedTensorAndAMissingFile) {
  const std::string dir = CopyFixture("diff");
  Result<DcpIndex> idx = ReadDcpIndex(DefaultStorage(), dir);
  ASSERT_TRUE(idx.ok()) << idx.status().ToString();
  const ChunkRecord& c = idx->m.tensors[idx->m.FindTensor("w")].chunks[1];  // rows 3:5
  const std::string path = dir + "/" + idx->m.files[c.file];
  Result<std::string> bytes = DefaultStorage()->ReadFileToString(path);
  ASSERT_TRUE(bytes.ok());
  (*bytes)[c.offset + 3] ^= 0x01;  // w[3, 0] = 9 -> a sign-preserving exponent change
  ASSERT_TRUE(DefaultStorage()->WriteStringToFile(path, *bytes).ok());
  CliRun d = RunCli("diff " + Fixture() + " " + dir);
  EXPECT_EQ(d.exit_code, 1) << d.out;
  EXPECT_THAT(d.out, HasSubstr("DIFFERENT  w  (1 elements"));
  EXPECT_THAT(d.out, HasSubstr("2 equal, 1 different"));

  std::filesystem::remove(path);
  CliRun m = RunCli("diff " + Fixture() + " " + dir);
  EXPECT_EQ(m.exit_code, 2) << m.out;
  EXPECT_THAT(m.out, HasSubstr(idx->m.files[c.file]));
  const std::string out = dir + "_hf";
  CliRun e = RunCli("export-hf " + dir + " " + out);
  EXPECT_EQ(e.exit_code, 2) << e.out;
  EXPECT_THAT(e.out, HasSubstr(idx->m.files[c.file]));
  std::filesystem::remove_all(dir);
  std::filesystem::remove_all(out);
}

// The fixture of tensors torch.save stored with strides (make_strided_fixture.py)
// on every path: inspect, verify, convert (both ways), export-hf, diff; the
// converted checkpoint and the export hold w_t[i, j] = 40 j + i and
// p3[a, b, c] = 12 b + 4 c + a, read back by the plain readers.
TEST(DcpCliTest, StridedItemsReadOnEveryPath) {
  const std::string fx =
      std::filesystem::path(Fixture()).parent_path().string() + "/torch113_strided";
  const std::string base = ::testing::TempDir() + "sp_dcp_strided_" + std::to_string(::getpid());
  for (const char* s : {"_sp", "_hf", "_dcp"}) std::filesystem::remove_all(base + s);
  CliRun i = RunCli("inspect " + fx);
  EXPECT_EQ(i.exit_code, 0) << i.out;
  EXPECT_THAT(i.out, HasSubstr("w_t"));
  CliRun v = RunCli("verify " + fx);
  EXPECT_EQ(v.exit_code, 0) << v.out;
  ASSERT_EQ(RunCli("convert " + fx + " " + base + "_sp").exit_code, 0);
  ASSERT_EQ(RunCli("export-hf " + fx + " " + base + "_hf").exit_code, 0);
  CliRun c = RunCli("convert --to dcp --torch 1.13 " + fx + " " + base + "_dcp");
  ASSERT_EQ(c.exit_code, 0) << c.out;
  for (const char* s : {"_sp", "_hf", "_dcp"}) {
    CliRun d = RunCli("diff " + fx + " " + base + s);
    EXPECT_EQ(d.exit_code, 0) << s << d.out;
    EXPECT_THAT(d.out, HasSubstr("EQUAL: 6 tensors"));
  }
  auto check = [&](const std::string& dir, bool hf) {
    std::vector<float> w(40 * 48, -1);
    std::vector<int32_t> p(24, -1);
    State st;
    LocalTensor t;
    t.dtype = DType::kF32;
    t.shape = {40, 48};
    t.data = w.data();
    t.segments.push_back({"w_t", {40, 48}, Box::Whole({40, 48}), {0, 0}});
    st.tensors.push_back(t);
    t.dtype = DType::kI32;
    t.shape = {4, 2, 3};
    t.data = p.data();
    t.segments = {{"p3", {4, 2, 3}, Box::Whole({4, 2, 3}), {0, 0, 0}}};
    st.tensors.push_back(t);
    std::unique_ptr<Comm> comm = MakeSingleComm();
    HfLoadOptions o;
    o.load.allow_unexpected_keys = true;
    Result<LoadResult> lr =
        hf ? LoadFromHf(st, dir, IdentityHfMapping(), *comm, o) : Load(st, dir, *comm, o.load);
    ASSERT_TRUE(lr.ok()) << dir << ": " << lr.status().ToString();
    for (int r = 0; r < 40; ++r) {
      for (int col = 0; col < 48; ++col) ASSERT_EQ(w[r * 48 + col], 40.0f * col + r) << dir;
    }
    for (int k = 0; k < 24; ++k) ASSERT_EQ(p[k], 12 * (k / 3 % 2) + 4 * (k % 3) + k / 6) << dir;
  };
  check(base + "_sp", false);
  check(base + "_hf", true);
  check(base + "_dcp", false);
  for (const char* s : {"_sp", "_hf", "_dcp"}) std::filesystem::remove_all(base + s);
}

// export-hf --mapping megatron_llama of a Megatron-Core torch_dist checkpoint
// whose per-layer tensors are stacked over layers (make_megatron_fixture.py
// --llama: tensor i holds 1000 i + flat index). The HF model is read back by
// the HF loader (identity names) and every value is checked against the
// Megatron layout computed here: linear_qkv rows per group j of 4 (q heads
// 2j, 2j+1), 2 (k), 2 (v); linear_fc1 gate rows then up rows; the padded
// vocabulary (12 rows) cut to vocab_size 10. No --set: heads, groups and the
// vocabulary come from common.pt's args (num_attention_heads 4,
// group_query_attention with num_query_groups 2, vocab_size 10).
TEST(DcpCliTest, ExportHfMegatronLlamaUnstacksLayersBitForBit) {
  std::string dir = Fixture();
  dir = dir.substr(0, dir.rfind('/')) + "/megatron_llama_torch_dist";
  const std::string out = ::testing::TempDir() + "sp_mega_hf_" + std::to_string(::getpid());
  std::filesystem::remove_all(out);
  CliRun r = RunCli("export-hf " + dir + " " + out + " --mapping megatron_llama");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("21 tensors"));

  State st;
  std::map<std::string, std::vector<float>> f32;
  auto add = [&st, &f32](const std::string& name, const Shape& shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<float>& v = f32[name];
    v.assign(static_cast<size_t>(n), -1.0f);
    LocalTensor t;
    t.dtype = DType::kF32;
    t.shape = shape;
    t.data = v.data();
    t.segments.push_back({name, shape, Box::Whole(shape), Shape(shape.size(), 0)});
    st.tensors.push_back(t);
  };
  for (int l = 0; l < 2; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    add(p + "input_layernorm.weight", {8});
    add(p + "self_attn.q_proj.weight", {8, 8});
    add(p + "self_attn.k_proj.weight", {4, 8});
    add(p + "self_attn.v_proj.weight", {4, 8});
    add(p + "self_attn.o_proj.weight", {8, 8});
    add(p + "post_attention_layernorm.weight", {8});
    add(p + "mlp.gate_proj.weight", {6, 8});
    add(p + "mlp.up_proj.weight", {6, 8});
    add(p + "mlp.down_proj.weight", {8, 6});
  }
  add("model.norm.weight", {8});
  add("lm_head.weight", {10, 8});
  std::vector<uint16_t> emb(80, 0xffff);
  LocalTensor et;
  et.dtype = DType::kBF16;
  et.shape = {10, 8};
  et.data = emb.data();
  et.segments.push_back({"model.embed_tokens.weight", {10, 8}, Box::Whole({10, 8}), {0, 0}});
  st.tensors.push_back(et);
  std::unique_ptr<Comm> comm = MakeSingleComm();
  Result<LoadResult> lr = LoadFromHf(st, out, IdentityHfMapping(), *comm);
  ASSERT_TRUE(lr.ok()) << lr.status().ToString();

  // Source tensor i, layer l, row, column of a [L, rows, cols] key.
  auto src = [](int i, int l, int rows, int cols, int row, int col) {
    return static_cast<float>(1000 * i + (l * rows + row) * cols + col);
  };
  auto check = [&f32](const std::string& name, int rows, int cols, auto want) {
    const std::vector<float>& v = f32.at(name);
    for (int a = 0; a < rows; ++a) {
      for (int c = 0; c < cols; ++c) {
        ASSERT_EQ(v[a * cols + c], want(a, c)) << name << " [" << a << ", " << c << "]";
      }
    }
  };
  for (int l = 0; l < 2; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    check(p + "input_layernorm.weight", 1, 8, [&](int, int c) { return src(1, l, 1, 8, 0, c); });
    // q row a: head a / 2, group a / 4, row a % 4 of the group's q rows.
    check(p + "self_attn.q_proj.weight", 8, 8,
          [&](int a, int c) { return src(2, l, 16, 8, (a / 4) * 8 + a % 4, c); });
    check(p + "self_attn.k_proj.weight", 4, 8,
          [&](int a, int c) { return src(2, l, 16, 8, (a / 2) * 8 + 4 + a % 2, c); });
    check(p + "self_attn.v_proj.weight", 4, 8,
          [&](int a, int c) { return src(2, l, 16, 8, (a / 2) * 8 + 6 + a % 2, c); });
    check(p + "self_attn.o_proj.weight", 8, 8, [&](int a, int c) { return src(3, l, 8, 8, a, c); });
    check(p + "post_attention_layernorm.weight", 1, 8,
          [&](int, int c) { return src(4, l, 1, 8, 0, c); });
    check(p + "mlp.gate_proj.weight", 6, 8, [&](int a, int c) { return src(5, l, 12, 8, a, c); });
    check(p + "mlp.up_proj.weight", 6, 8, [&](int a, int c) { return src(5, l, 12, 8, 6 + a, c); });
    check(p + "mlp.down_proj.weight", 8, 6, [&](int a, int c) { return src(6, l, 8, 6, a, c); });
  }
  check("model.norm.weight", 1, 8, [&](int, int c) { return src(7, 0, 1, 8, 0, c); });
  check("lm_head.weight", 10, 8, [&](int a, int c) { return src(8, 0, 12, 8, a, c); });
  for (int k = 0; k < 80; ++k) {
    float f = 0.25f * static_cast<float>(k);
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    ASSERT_EQ(emb[k], static_cast<uint16_t>(bits >> 16)) << "embed_tokens flat " << k;
  }

  std::filesystem::remove_all(out);
}

// common.pt's args are defaults: an explicit --set wins (vocab_size=12 keeps
// the padding rows), and without common.pt the head counts are a typed error
// naming the variable.
TEST(DcpCliTest, ExportHfMegatronArgsAreDefaultsSetWins) {
  std::string fixture = Fixture();
  fixture = fixture.substr(0, fixture.rfind('/')) + "/megatron_llama_torch_dist";
  const std::string out = ::testing::TempDir() + "sp_mega_set_" + std::to_string(::getpid());
  std::filesystem::remove_all(out);
  CliRun r = RunCli("export-hf " + fixture + " " + out + " --mapping megatron_llama" +
                    " --set vocab_size=12");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  Result<std::vector<HfKeyInfo>> info = DescribeHf(out, IdentityHfMapping());
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  int seen = 0;
  for (const HfKeyInfo& k : *info) {
    if (k.key == "lm_head.weight" || k.key == "model.embed_tokens.weight") {
      EXPECT_EQ(k.shape, (Shape{12, 8})) << k.key;
      ++seen;
    }
  }
  EXPECT_EQ(seen, 2);
  std::filesystem::remove_all(out);

  const std::string dir = ::testing::TempDir() + "sp_mega_nocommon_" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::copy(fixture, dir);
  std::filesystem::remove(dir + "/common.pt");
  CliRun nov =
      RunCli("export-hf " + dir + " " + out + " --mapping megatron_llama --set vocab_size=10");
  EXPECT_EQ(nov.exit_code, 2) << nov.out;
  EXPECT_THAT(nov.out, HasSubstr("num_attention_heads"));
  std::filesystem::remove_all(out);
  std::filesystem::remove_all(dir);
}

// export-hf --mapping megatron_moe of a Megatron-Core MoE torch_dist
// checkpoint whose experts are stacked under the layer dim ([L, E, ...]:
// make_megatron_fixture.py --moe, tensor i holds 1000 i + flat index), with
// no --set (common.pt's args give heads, groups, vocab_size). Every HF
// tensor is checked value by value; `diff` of the checkpoint and its export
// through the same mapping (HF -> keys: both stacked placeholders) is equal.
TEST(DcpCliTest, ExportHfMegatronMoeUnstacksLayersAndExperts) {
  std::string dir = Fixture();
  dir = dir.substr(0, dir.rfind('/')) + "/megatron_moe_torch_dist";
  const std::string out = ::testing::TempDir() + "sp_moe_hf_" + std::to_string(::getpid());
  std::filesystem::remove_all(out);
  CliRun r = RunCli("export-hf " + dir + " " + out + " --mapping megatron_moe");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  // 2 x (input norm, q, k, v, o, post norm, router, 4 x (gate, up, down)) + 3.
  EXPECT_THAT(r.out, HasSubstr("41 tensors"));

  State st;
  std::map<std::string, std::vector<float>> f32;
  auto add = [&st, &f32](const std::string& name, const Shape& shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<float>& v = f32[name];
    v.assign(static_cast<size_t>(n), -1.0f);
    LocalTensor t;
    t.dtype = DType::kF32;
    t.shape = shape;
    t.data = v.data();
    t.segments.push_back({name, shape, Box::Whole(shape), Shape(shape.size(), 0)});
    st.tensors.push_back(t);
  };
  for (int l = 0; l < 2; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    add(p + "input_layernorm.weight", {4});
    add(p + "self_attn.q_proj.weight", {4, 4});
    add(p + "self_attn.k_proj.weight", {2, 4});
    add(p + "self_attn.v_proj.weight", {2, 4});
    add(p + "self_attn.o_proj.weight", {4, 4});
    add(p + "post_attention_layernorm.weight", {4});
    add(p + "mlp.gate.weight", {4, 4});
    for (int e = 0; e < 4; ++e) {
      const std::string x = p + "mlp.experts." + std::to_string(e) + ".";
      add(x + "gate_proj.weight", {2, 4});
      add(x + "up_proj.weight", {2, 4});
      add(x + "down_proj.weight", {4, 2});
    }
  }
  add("model.embed_tokens.weight", {6, 4});
  add("model.norm.weight", {4});
  add("lm_head.weight", {6, 4});
  std::unique_ptr<Comm> comm = MakeSingleComm();
  Result<LoadResult> lr = LoadFromHf(st, out, IdentityHfMapping(), *comm);
  ASSERT_TRUE(lr.ok()) << lr.status().ToString();

  // Source tensor i at flat index `flat`.
  auto src = [](int i, int64_t flat) { return static_cast<float>(1000 * i + flat); };
  auto check = [&f32](const std::string& name, auto want) {
    const std::vector<float>& v = f32.at(name);
    for (size_t k = 0; k < v.size(); ++k) {
      ASSERT_EQ(v[k], want(static_cast<int64_t>(k))) << name << " flat " << k;
    }
  };
  for (int l = 0; l < 2; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    check(p + "input_layernorm.weight", [&](int64_t k) { return src(1, l * 4 + k); });
    // linear_qkv [2, 8, 4], one group: q rows 0-3, k rows 4-5, v rows 6-7.
    check(p + "self_attn.q_proj.weight", [&](int64_t k) { return src(2, l * 32 + k); });
    check(p + "self_attn.k_proj.weight", [&](int64_t k) { return src(2, l * 32 + 16 + k); });
    check(p + "self_attn.v_proj.weight", [&](int64_t k) { return src(2, l * 32 + 24 + k); });
    check(p + "self_attn.o_proj.weight", [&](int64_t k) { return src(3, l * 16 + k); });
    check(p + "post_attention_layernorm.weight", [&](int64_t k) { return src(4, l * 4 + k); });
    check(p + "mlp.gate.weight", [&](int64_t k) { return src(5, l * 16 + k); });
    for (int e = 0; e < 4; ++e) {
      const std::string x = p + "mlp.experts." + std::to_string(e) + ".";
      // linear_fc1 [2, 4, 4, 4]: expert (l, e) at flat (4 l + e) * 16; gate rows, then up.
      const int64_t fc1 = (l * 4 + e) * 16;
      check(x + "gate_proj.weight", [&](int64_t k) { return src(6, fc1 + k); });
      check(x + "up_proj.weight", [&](int64_t k) { return src(6, fc1 + 8 + k); });
      check(x + "down_proj.weight", [&](int64_t k) { return src(7, (l * 4 + e) * 8 + k); });
    }
  }
  check("model.embed_tokens.weight", [&](int64_t k) { return src(0, k); });  // 6 of 8 rows
  check("model.norm.weight", [&](int64_t k) { return src(8, k); });
  check("lm_head.weight", [&](int64_t k) { return src(9, k); });

  // HF -> keys through the same rules, with no --set either (the export has
  // no config.json: the checkpoint's args give the HF side's sizes, in either
  // argument order): the experts stacked back under the layers equal the
  // checkpoint's bit for bit; only the vocabulary keys differ, cut to 6 rows.
  for (const std::string& args : {dir + " " + out, out + " " + dir}) {
    CliRun d = RunCli("diff " + args + " --mapping megatron_moe");
    EXPECT_EQ(d.exit_code, 1) << d.out;
    EXPECT_THAT(d.out, HasSubstr("8 equal, 0 different, 2 mismatched, 0 only in A, 0 only in B"));
    EXPECT_THAT(d.out, HasSubstr("embedding.word_embeddings.weight  (shape ["));
    EXPECT_THAT(d.out, HasSubstr("output_layer.weight  (shape ["));
  }
  // An explicit --set still wins over the args: 2 groups do not fit.
  CliRun set =
      RunCli("diff " + dir + " " + out + " --mapping megatron_moe --set num_key_value_heads=2");
  EXPECT_EQ(set.exit_code, 2) << set.out;
  std::filesystem::remove_all(out);
}

// export-hf (no mapping: keys kept) of the distributed optimizer's
// fully_sharded_model_space state (make_megatron_fixture.py --fsms): each
// state of a parameter exported in the parameter's shape, rebuilt from the N-D
// flattened chunks; exp_avg_sq of the stacked fc2 [2, 4, 6] holds 30000 +
// flat index.
TEST(DcpCliTest, ExportHfMegatronNdFlattenedStatePerParameter) {
  std::string dir = Fixture();
  dir = dir.substr(0, dir.rfind('/')) + "/megatron_fsms_torch_dist";
  const std::string out = ::testing::TempDir() + "sp_fsms_hf_" + std::to_string(::getpid());
  std::filesystem::remove_all(out);
  CliRun r = RunCli("export-hf " + dir + " " + out);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("12 tensors"));
  const std::string key = "optimizer.state.exp_avg_sq.decoder.layers.mlp.linear_fc2.weight";
  std::vector<float> v(48, -1.0f);
  State st;
  LocalTensor t;
  t.dtype = DType::kF32;
  t.shape = {2, 4, 6};
  t.data = v.data();
  t.segments.push_back({key, {2, 4, 6}, Box::Whole({2, 4, 6}), {0, 0, 0}});
  st.tensors.push_back(t);
  std::unique_ptr<Comm> comm = MakeSingleComm();
  HfLoadOptions o;
  o.load.allow_unexpected_keys = true;
  Result<LoadResult> lr = LoadFromHf(st, out, IdentityHfMapping(), *comm, o);
  ASSERT_TRUE(lr.ok()) << lr.status().ToString();
  for (int k = 0; k < 48; ++k) ASSERT_EQ(v[k], 30000.0f + static_cast<float>(k)) << k;
  std::filesystem::remove_all(out);
}

// export-hf (no mapping) of the distributed optimizer's dp_reshardable
// buckets (make_megatron_distopt_fixture.py): every state of every parameter
// is exported in the parameter's shape, rebuilt from the buckets (10000
// (state + 1) + 1000 param + flat index), beside the buckets themselves.
TEST(DcpCliTest, ExportHfMegatronDpReshardableStatePerParameter) {
  std::string dir = Fixture();
  dir = dir.substr(0, dir.rfind('/')) + "/megatron_dpr_torch_dist";
  const std::string out = ::testing::TempDir() + "sp_dpr_hf_" + std::to_string(::getpid());
  std::filesystem::remove_all(out);
  CliRun r = RunCli("export-hf " + dir + " " + out);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("66 tensors"));  // 9 weights, 27 states, 30 buckets
  const std::vector<std::pair<std::string, Shape>> params = {
      {"embedding.word_embeddings.weight", {40, 4}},
      {"decoder.layers.self_attention.linear_proj.weight", {2, 4, 40}},
      {"decoder.layers.self_attention.linear_qkv.layer_norm_weight", {2, 4}},
      {"decoder.layers.self_attention.linear_qkv.weight", {2, 8, 4}},
      {"decoder.layers.mlp.linear_fc1.layer_norm_weight", {2, 4}},
      {"decoder.layers.mlp.linear_fc1.weight", {2, 36, 4}},
      {"decoder.layers.mlp.linear_fc2.weight", {2, 4, 18}},
      {"decoder.final_layernorm.weight", {4}},
      {"output_layer.weight", {40, 4}}};
  const std::vector<std::string> states = {"param", "exp_avg", "exp_avg_sq"};
  State st;
  std::vector<std::vector<float>> bufs;
  bufs.reserve(params.size() * states.size());
  for (const auto& [key, shape] : params) {
    for (const std::string& s : states) {
      bufs.emplace_back(Box::Whole(shape).num_elements(), -1.0f);
      st.tensors.push_back(
          WholeTensor("optimizer.state." + s + "." + key, DType::kF32, bufs.back().data(), shape));
    }
  }
  std::unique_ptr<Comm> comm = MakeSingleComm();
  HfLoadOptions o;
  o.load.allow_unexpected_keys = true;
  Result<LoadResult> lr = LoadFromHf(st, out, IdentityHfMapping(), *comm, o);
  ASSERT_TRUE(lr.ok()) << lr.status().ToString();
  for (size_t p = 0, b = 0; p < params.size(); ++p) {
    for (size_t j = 0; j < states.size(); ++j, ++b) {
      for (size_t k = 0; k < bufs[b].size(); ++k) {
        ASSERT_EQ(bufs[b][k], static_cast<float>(10000 * (j + 1) + 1000 * p + k))
            << params[p].first << " " << states[j] << " " << k;
      }
    }
  }
  std::filesystem::remove_all(out);
}

// The first Megatron fixture also holds optimizer state: megatron_llama
// leaves optimizer.* out ("skip") and exports the stacked linear_fc1
// (100 l + 3 r + c, [2, 4, 3]) as per-layer gate (rows 0-1) and up (rows 2-3).
TEST(DcpCliTest, ExportHfMegatronLlamaSkipsOptimizerState) {
  std::string dir = Fixture();
  dir = dir.substr(0, dir.rfind('/')) + "/megatron_torch_dist";
  const std::string out = ::testing::TempDir() + "sp_mega_opt_" + std::to_string(::getpid());
  std::filesystem::remove_all(out);
  CliRun r =
      RunCli("export-hf " + dir + " " + out + " --mapping megatron_llama --set vocab_size=4");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("5 tensors"));
  std::vector<float> w(4 * 6, -1.0f);
  State st;
  for (int l = 0; l < 2; ++l) {
    for (int part = 0; part < 2; ++part) {
      const std::string name = "model.layers." + std::to_string(l) + ".mlp." +
                               (part == 0 ? "gate_proj" : "up_proj") + ".weight";
      LocalTensor t;
      t.dtype = DType::kF32;
      t.shape = {2, 3};
      t.data = w.data() + (l * 2 + part) * 6;
      t.segments.push_back({name, {2, 3}, Box::Whole({2, 3}), {0, 0}});
      st.tensors.push_back(t);
    }
  }
  std::vector<uint16_t> emb(8, 0xffff);
  LocalTensor et;
  et.dtype = DType::kBF16;
  et.shape = {4, 2};
  et.data = emb.data();
  et.segments.push_back({"model.embed_tokens.weight", {4, 2}, Box::Whole({4, 2}), {0, 0}});
  st.tensors.push_back(et);
  std::unique_ptr<Comm> comm = MakeSingleComm();
  Result<LoadResult> lr = LoadFromHf(st, out, IdentityHfMapping(), *comm);
  ASSERT_TRUE(lr.ok()) << lr.status().ToString();
  // bf16 of 0.25 k, k = 0..7.
  EXPECT_EQ(
      emb, (std::vector<uint16_t>{0x0000, 0x3e80, 0x3f00, 0x3f40, 0x3f80, 0x3fa0, 0x3fc0, 0x3fe0}));
  for (int l = 0; l < 2; ++l) {
    for (int row = 0; row < 4; ++row) {
      for (int c = 0; c < 3; ++c) {
        EXPECT_EQ(w[(l * 4 + row) * 3 + c], static_cast<float>(100 * l + 3 * row + c));
      }
    }
  }
  std::filesystem::remove_all(out);
}

TEST(DcpCliTest, InspectShowsMegatronTorchDistMetadataAndCommon) {
  std::string dir = Fixture();
  dir = dir.substr(0, dir.rfind('/')) + "/megatron_torch_dist";
  CliRun r = RunCli("inspect " + dir);
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("decoder.layers.mlp.linear_fc1.weight"));
  EXPECT_THAT(r.out, HasSubstr("Megatron torch_dist checkpoint: "));
  EXPECT_THAT(r.out, HasSubstr("\"__class__\":\"argparse.Namespace\""));
  CliRun v = RunCli("verify " + dir);
  EXPECT_EQ(v.exit_code, 0) << v.out;
}

}  // namespace
}  // namespace shardpoint
