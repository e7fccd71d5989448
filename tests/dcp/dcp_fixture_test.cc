// The committed DCP fixtures, written by torch 1.13
// (tests/dcp/fixtures/make_fixture.py) and by torch 2.11
// (make_torch2_fixture.py) with the same contents: indexed, loaded whole and
// resharded bit for bit without Python.
#include <gtest/gtest.h>

#include <cstring>

#include "shardpoint/checkpoint.h"
#include "shardpoint/checkpoint_kind.h"
#include "shardpoint/comm.h"
#include "shardpoint/verify.h"
#include "src/dcp/dcp_dir.h"
#include "src/source/open_source.h"
#include "tests/testing/ranks.h"
#include "tests/testing/torch_newer_dtypes.h"

using shardpoint::internal_dcp::DcpIndex;
using shardpoint::internal_dcp::ReadDcpIndex;
using shardpoint::internal_format::Manifest;
using shardpoint::internal_source::DecodeSource;
using shardpoint::internal_source::OpenCheckpointSource;
using shardpoint::internal_source::ReadSourceBytes;
using shardpoint::internal_source::Source;

namespace shardpoint {
namespace {

// The committed fixture: beside this file (__FILE__ is relative to the build
// directory under ccache's base dir), or under the working directory.
std::string Fixture(const std::string& name) {
  std::string f = __FILE__;
  std::string dir = f.substr(0, f.rfind("/tests/dcp/")) + "/tests/dcp/fixtures/" + name;
  Result<bool> here = DefaultStorage()->Exists(dir + "/.metadata");
  if (!here.ok() || !*here) {
    dir = "tests/dcp/fixtures/" + std::string(name);
  }
  return dir;
}

LocalTensor Whole(const std::string& key, DType dtype, const Shape& shape, void* data) {
  LocalTensor t;
  t.dtype = dtype;
  t.shape = shape;
  t.data = data;
  t.segments.push_back({key, shape, Box::Whole(shape), Shape(shape.size(), 0)});
  return t;
}

class DcpFixtureTest : public ::testing::TestWithParam<const char*> {
 protected:
  std::string dir() const { return Fixture(GetParam()); }
};

TEST_P(DcpFixtureTest, IndexesTensorsChunksAndBytes) {
  Result<DcpIndex> idx = ReadDcpIndex(DefaultStorage(), dir());
  ASSERT_TRUE(idx.ok()) << idx.status().ToString();
  EXPECT_EQ(idx->metadata.torch_major, std::string(GetParam()).starts_with("torch2") ? 2 : 1);
  const Manifest& m = idx->m;
  ASSERT_EQ(m.tensors.size(), 3u);
  EXPECT_EQ(m.tensors[0].key, "b");
  EXPECT_EQ(m.tensors[0].dtype, DType::kBF16);
  EXPECT_EQ(m.tensors[1].key, "idx");
  EXPECT_EQ(m.tensors[1].dtype, DType::kI64);
  EXPECT_EQ(m.tensors[2].key, "w");
  EXPECT_EQ(m.tensors[2].shape, (Shape{5, 3}));
  ASSERT_EQ(m.tensors[2].chunks.size(), 2u);
  EXPECT_EQ(m.tensors[2].chunks[0].box, Box({0, 0}, {3, 3}));
  EXPECT_EQ(m.tensors[2].chunks[1].box, Box({3, 0}, {2, 3}));
  EXPECT_EQ(m.tensors[2].chunks[0].nbytes, 36u);
  ASSERT_EQ(m.objects.size(), 1u);
  EXPECT_EQ(m.objects[0].key, "blob");
  EXPECT_EQ(DetectCheckpointKind(dir()).value(), CheckpointKind::kPyTorchDcp);
}

// The one door: opened in one process or read and decoded (as Load
// broadcasts it), the directory is a Source of kind kPyTorchDcp with the
// index ReadDcpIndex builds; describe and verify say the same kind.
TEST_P(DcpFixtureTest, OpensAsASourceOfItsKind) {
  Result<DcpIndex> idx = ReadDcpIndex(DefaultStorage(), dir());
  ASSERT_TRUE(idx.ok()) << idx.status().ToString();
  Result<Source> one = OpenCheckpointSource(DefaultStorage(), dir());
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  Result<std::string> bytes = ReadSourceBytes(DefaultStorage(), dir());
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  Result<Source> sent = DecodeSource(*bytes, dir());
  ASSERT_TRUE(sent.ok()) << sent.status().ToString();
  for (const Source* s : {&*one, &*sent}) {
    EXPECT_EQ(s->checkpoint_kind, CheckpointKind::kPyTorchDcp);
    EXPECT_FALSE(s->has_checksums);
    EXPECT_EQ(s->dir, dir());
    ASSERT_EQ(s->index.tensors.size(), idx->m.tensors.size());
    for (size_t t = 0; t < idx->m.tensors.size(); ++t) {
      EXPECT_EQ(s->index.tensors[t].key, idx->m.tensors[t].key);
      EXPECT_EQ(s->index.tensors[t].chunks.size(), idx->m.tensors[t].chunks.size());
    }
    EXPECT_EQ(s->views.size(), idx->views.size());
  }
  Result<CheckpointDescription> d = DescribeCheckpoint(dir());
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->kind, CheckpointKind::kPyTorchDcp);
  Result<VerifyReport> v = VerifyCheckpoint(dir());
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v->kind, CheckpointKind::kPyTorchDcp);
  EXPECT_TRUE(v->ok());
  // No directory: the manifest's NotFound, naming it, as Load said before.
  Result<Source> none = OpenCheckpointSource(DefaultStorage(), dir() + "-missing");
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound);
  EXPECT_NE(none.status().ToString().find("manifest"), std::string::npos);
}

TEST_P(DcpFixtureTest, LoadsWholeTensorsBitForBit) {
  std::vector<float> w(15);
  std::vector<uint16_t> b(4);
  std::vector<int64_t> idx(4);
  State st;
  st.tensors.push_back(Whole("w", DType::kF32, {5, 3}, w.data()));
  st.tensors.push_back(Whole("b", DType::kBF16, {4}, b.data()));
  st.tensors.push_back(Whole("idx", DType::kI64, {2, 2}, idx.data()));
  st.objects.push_back(Object{"blob", "", {}, {}});
  std::unique_ptr<Comm> comm = MakeSingleComm();
  Result<LoadResult> r = Load(st, dir(), *comm);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  for (int i = 0; i < 15; ++i) EXPECT_EQ(w[i], static_cast<float>(i));
  // bfloat16 0, 0.5, 1, 1.5
  EXPECT_EQ(b, (std::vector<uint16_t>{0x0000, 0x3f00, 0x3f80, 0x3fc0}));
  EXPECT_EQ(idx, (std::vector<int64_t>{10, 11, 12, 13}));
  // A byte item is the bytes DCP stored: torch (1.13 and 2.11) torch.saves the BytesIO.
  ASSERT_GE(st.objects[0].bytes.size(), 4u);
  EXPECT_EQ(st.objects[0].bytes.substr(0, 4), std::string("PK\x03\x04", 4));
  EXPECT_NE(st.objects[0].bytes.find("shardpoint-dcp"), std::string::npos);
}

// Three ranks read column slices of w across both stored chunks.
TEST_P(DcpFixtureTest, ReshardsAcrossStoredChunks) {
  std::vector<std::vector<float>> out(3);
  for (auto& o : out) o.assign(5, -1);
  Status s = testing::FirstError(RunThreadRanks(3, [&](Comm& comm) -> Status {
    const int r = comm.rank();
    State st;
    LocalTensor lt;
    lt.dtype = DType::kF32;
    lt.shape = {5, 1};
    lt.data = out[r].data();
    lt.segments.push_back({"w", {5, 3}, Box({0, r}, {5, 1}), {0, 0}});
    st.tensors.push_back(lt);
    LoadOptions o;
    o.allow_unexpected_keys = true;
    return Load(st, dir(), comm, o).status();
  }));
  ASSERT_TRUE(s.ok()) << s.ToString();
  for (int r = 0; r < 3; ++r) {
    for (int i = 0; i < 5; ++i)
      EXPECT_EQ(out[r][i], static_cast<float>(3 * i + r)) << r << " " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, DcpFixtureTest,
                         ::testing::Values("torch113_2ranks", "torch113_per_rank", "torch2_2ranks",
                                           "torch2_per_rank"));

// torch 2.11's DCP of its newer dtypes (`_rebuild_tensor_v3` of a
// torch.storage.UntypedStorage: make_torch2_newer_dtypes.py): a (5, 6) tensor
// of each, byte j of the k-th being (7 j + 13 k + 1) % 251, loaded as rows 1:4
// x columns 2:5 bit for bit.
TEST(DcpNewerDTypesFixtureTest, LoadsABoxOfEachBitForBit) {
  const auto& kNewer = testing::kTorchNewerDTypes;
  std::vector<std::vector<uint8_t>> got;
  State st;
  for (const testing::TorchNewerDType& n : kNewer) {
    got.emplace_back(9 * DTypeSize(n.dtype), 0);
    LocalTensor lt;
    lt.dtype = n.dtype;
    lt.shape = {3, 3};
    lt.data = got.back().data();
    lt.segments.push_back({n.name, {5, 6}, Box({1, 2}, {3, 3}), {0, 0}});
    st.tensors.push_back(lt);
  }
  std::unique_ptr<Comm> comm = MakeSingleComm();
  Result<LoadResult> r = Load(st, Fixture("torch2_newer_dtypes"), *comm);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  for (size_t k = 0; k < got.size(); ++k) {
    const size_t es = DTypeSize(kNewer[k].dtype);
    for (size_t i = 0; i < 3; ++i) {
      for (size_t j = 0; j < 3 * es; ++j) {
        const size_t src = (1 + i) * 6 * es + 2 * es + j;  // byte in the stored tensor
        ASSERT_EQ(got[k][i * 3 * es + j], (7 * src + 13 * k + 1) % 251)
            << kNewer[k].name << " row " << i << " byte " << j;
      }
    }
  }
}

}  // namespace
}  // namespace shardpoint
