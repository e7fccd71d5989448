// ConvertToDcp: a shardpoint checkpoint -> a PyTorch DCP directory, read back
// by the DCP reader (Load, resharded, bit for bit) and checked item by item
// (the torch.save archives, the .metadata pickle); the typed errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <random>

#include "shardpoint/checkpoint.h"
#include "shardpoint/comm.h"
#include "shardpoint/hf.h"
#include "src/checkpoint/verify_dcp.h"
#include "src/dcp/byte_item_writer.h"
#include "src/dcp/dcp_dir.h"
#include "src/dcp/metadata.h"
#include "src/dcp/metadata_writer.h"
#include "src/dcp/tensor_item.h"
#include "src/dcp/zip.h"

using shardpoint::internal_checkpoint::VerifyDcp;
using shardpoint::internal_dcp::Crc32;
using shardpoint::internal_dcp::Crc32Combine;
using shardpoint::internal_dcp::DcpIndex;
using shardpoint::internal_dcp::DcpMetadata;
using shardpoint::internal_dcp::DcpStorageInfo;
using shardpoint::internal_dcp::DecodeDcpMetadata;
using shardpoint::internal_dcp::EncodeDcpByteItem;
using shardpoint::internal_dcp::EncodeDcpMetadata;
using shardpoint::internal_dcp::ObjectSource;
using shardpoint::internal_dcp::ReadDcpIndex;

namespace shardpoint {
namespace {

using ::testing::HasSubstr;

std::string Temp(const std::string& name) {
  const std::string d = ::testing::TempDir() + "sp_dcpw_" + name + "_" + std::to_string(::getpid());
  std::filesystem::remove_all(d);
  std::filesystem::remove_all(d + ".partial");
  return d;
}

std::vector<char> RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<char> v(n);
  for (char& c : v) c = static_cast<char>(rng());
  return v;
}

// "w": f32 (6, 5) saved as two row chunks; "e": bf16 (7,); "i": i64 (3, 4) as
// two column chunks; "s": f64 scalar; object "rng".
struct Saved {
  std::vector<char> w = RandomBytes(6 * 5 * 4, 1), e = RandomBytes(7 * 2, 2),
                    i = RandomBytes(3 * 4 * 8, 3), s = RandomBytes(8, 4);
};

LocalTensor Piece(const std::string& key, DType d, const Shape& global, const Box& box,
                  char* data) {
  LocalTensor t;
  t.dtype = d;
  t.shape = box.shape;
  t.data = data;
  t.segments.push_back({key, global, box, Shape(box.shape.size(), 0)});
  return t;
}

void SaveFixture(const std::string& dir, Saved& s, std::vector<std::vector<char>>* scratch) {
  State st;
  // Row chunks of w, column chunks of i: copied into contiguous pieces.
  for (int r : {0, 4}) {
    const int rows = r == 0 ? 4 : 2;
    scratch->emplace_back(s.w.begin() + r * 20, s.w.begin() + (r + rows) * 20);
    st.tensors.push_back(
        Piece("w", DType::kF32, {6, 5}, Box{{r, 0}, {rows, 5}}, scratch->back().data()));
  }
  for (int c : {0, 1}) {
    std::vector<char> piece;
    for (int r = 0; r < 3; ++r) {
      for (int k = c * 2; k < c * 2 + 2; ++k) {
        piece.insert(piece.end(), s.i.begin() + (r * 4 + k) * 8, s.i.begin() + (r * 4 + k + 1) * 8);
      }
    }
    scratch->push_back(std::move(piece));
    st.tensors.push_back(
        Piece("i", DType::kI64, {3, 4}, Box{{0, c * 2}, {3, 2}}, scratch->back().data()));
  }
  st.tensors.push_back(Piece("e", DType::kBF16, {7}, Box::Whole({7}), s.e.data()));
  st.tensors.push_back(Piece("s", DType::kF64, {}, Box::Whole({}), s.s.data()));
  st.objects.push_back({"rng", "\x01\x02seeded", {}, {}});
  std::unique_ptr<Comm> comm = MakeSingleComm();
  Result<SaveStats> r = Save(st, dir, *comm);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
}

TEST(DcpWriteTest, RoundTripThroughDcpReshardedBitForBit) {
  const std::string sp = Temp("sp"), dcp = Temp("dcp");
  Saved s;
  std::vector<std::vector<char>> scratch;
  SaveFixture(sp, s, &scratch);
  ExportHfOptions o;
  o.block_bytes = 16;  // several blocks per item: CRC-32s combined
  Result<ExportHfStats> st = ConvertToDcp(sp, dcp, HfMapping{}, o);
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_EQ(st->tensors, 4);
  EXPECT_FALSE(std::filesystem::exists(dcp + ".partial"));

  // The DCP reader sees every chunk as saved.
  Result<DcpIndex> idx = ReadDcpIndex(DefaultStorage(), dcp);
  ASSERT_TRUE(idx.ok()) << idx.status().ToString();
  ASSERT_EQ(idx->m.tensors.size(), 4u);
  EXPECT_EQ(idx->m.tensors[idx->m.FindTensor("w")].chunks.size(), 2u);
  EXPECT_EQ(idx->m.tensors[idx->m.FindTensor("i")].chunks.size(), 2u);

  // Load resharded: w by columns 0:2 and 2:5, i by rows, e from offset 3.
  std::vector<char> w0(6 * 2 * 4), w1(6 * 3 * 4), i0(1 * 4 * 8), i1(2 * 4 * 8), e(4 * 2), sc(8);
  State st2;
  st2.tensors.push_back(Piece("w", DType::kF32, {6, 5}, Box{{0, 0}, {6, 2}}, w0.data()));
  st2.tensors.push_back(Piece("w", DType::kF32, {6, 5}, Box{{0, 2}, {6, 3}}, w1.data()));
  st2.tensors.push_back(Piece("i", DType::kI64, {3, 4}, Box{{0, 0}, {1, 4}}, i0.data()));
  st2.tensors.push_back(Piece("i", DType::kI64, {3, 4}, Box{{1, 0}, {2, 4}}, i1.data()));
  st2.tensors.push_back(Piece("e", DType::kBF16, {7}, Box{{3}, {4}}, e.data()));
  st2.tensors.push_back(Piece("s", DType::kF64, {}, Box::Whole({}), sc.data()));
  st2.objects.push_back({"rng", "", {}, {}});
  std::unique_ptr<Comm> comm = MakeSingleComm();
  Result<LoadResult> lr = Load(st2, dcp, *comm);
  ASSERT_TRUE(lr.ok()) << lr.status().ToString();
  for (int r = 0; r < 6; ++r) {
    for (int c = 0; c < 5; ++c) {
      const char* want = s.w.data() + (r * 5 + c) * 4;
      const char* got = c < 2 ? w0.data() + (r * 2 + c) * 4 : w1.data() + (r * 3 + c - 2) * 4;
      ASSERT_EQ(std::memcmp(want, got, 4), 0) << r << "," << c;
    }
  }
  EXPECT_EQ(std::memcmp(i0.data(), s.i.data(), i0.size()), 0);
  EXPECT_EQ(std::memcmp(i1.data(), s.i.data() + 32, i1.size()), 0);
  EXPECT_EQ(std::memcmp(e.data(), s.e.data() + 6, e.size()), 0);
  EXPECT_EQ(sc, s.s);
  // An object in no encoding of the Python package goes out as a Python bytes
  // object of its bytes, in a torch.save archive (what DCP's loader reads).
  EXPECT_EQ(st2.objects[0].bytes,
            *EncodeDcpByteItem("\x01\x02seeded", ObjectSource::kShardpoint, "rng"));

  // VerifyDcp checks structure, coverage and every storage entry's CRC-32
  // (torch.load checks them too).
  Result<internal_checkpoint::VerifyReport> v = VerifyDcp(DefaultStorage(), dcp);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_TRUE(v->faults.empty()) << v->faults[0].message;
  std::filesystem::remove_all(sp);
  std::filesystem::remove_all(dcp);
}

class DcpMetadataWriteTest : public ::testing::TestWithParam<int> {};

TEST_P(DcpMetadataWriteTest, MetadataPickleDecodesBackToTheSame) {
  DcpMetadata md;
  md.torch_major = GetParam();
  md.tensors.push_back({"a", DType::kBF16, {4, 6}, {Box{{0, 0}, {2, 6}}, Box{{2, 0}, {2, 6}}}});
  md.tensors.push_back({"z", DType::kBool, {}, {Box::Whole({})}});
  md.bytes = {"blob"};
  md.storage[{"a", {0, 0}}] = {"__0_0.distcp", 0, 100, {}};
  md.storage[{"a", {2, 0}}] = {"__1_0.distcp", 5000000000, 100, {}};
  md.storage[{"z", {}}] = {"__0_0.distcp", 100, 10, {}};
  md.storage[{"blob", {}}] = {"__0_0.distcp", 110, 3, {}};
  Result<std::string> bytes = EncodeDcpMetadata(md);
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  Result<DcpMetadata> back = DecodeDcpMetadata(*bytes, ".metadata");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->torch_major, GetParam());
  // Only the torch that is asked for: torch 2.x's MetadataIndex unpickled from
  // the 1.13 alias is another class, and no read finds its storage entry.
  const bool old_paths = bytes->find("torch.distributed._shard.") != std::string::npos;
  const bool new_paths = bytes->find("torch.distributed.checkpoint.") != std::string::npos;
  EXPECT_EQ(old_paths, GetParam() == 1);
  EXPECT_EQ(new_paths, GetParam() == 2);
  ASSERT_EQ(back->tensors.size(), 2u);
  EXPECT_EQ(back->tensors[0].dtype, DType::kBF16);
  EXPECT_EQ(back->tensors[0].chunks, md.tensors[0].chunks);
  EXPECT_EQ(back->tensors[1].shape, Shape{});
  EXPECT_EQ(back->bytes, md.bytes);
  ASSERT_EQ(back->storage.size(), 4u);
  const DcpStorageInfo& far = back->storage.at({"a", {2, 0}});
  EXPECT_EQ(far.relative_path, "__1_0.distcp");
  EXPECT_EQ(far.offset, 5000000000u);
}

INSTANTIATE_TEST_SUITE_P(TorchMajor, DcpMetadataWriteTest, ::testing::Values(1, 2));

TEST(DcpWriteTest, MetadataForAnotherTorchIsRefused) {
  DcpMetadata md;
  md.torch_major = 3;
  Result<std::string> bytes = EncodeDcpMetadata(md);
  ASSERT_EQ(bytes.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bytes.status().message().find("torch major version 3"), std::string::npos);
}

TEST(DcpWriteTest, Crc32CombineEqualsTheWhole) {
  std::vector<char> d = RandomBytes(1000, 9);
  const uint32_t whole = Crc32(0, d.data(), d.size());
  for (size_t cut : {0, 1, 63, 500, 999, 1000}) {
    EXPECT_EQ(Crc32Combine(Crc32(0, d.data(), cut), Crc32(0, d.data() + cut, d.size() - cut),
                           d.size() - cut),
              whole)
        << cut;
  }
}

TEST(DcpWriteTest, ExistingDestinationIsRefused) {
  const std::string sp = Temp("sp_exists"), dcp = Temp("dcp_exists");
  Saved s;
  std::vector<std::vector<char>> scratch;
  SaveFixture(sp, s, &scratch);
  std::filesystem::create_directories(dcp);
  ASSERT_TRUE(DefaultStorage()->WriteStringToFile(dcp + "/keep", "mine").ok());
  Result<ExportHfStats> st = ConvertToDcp(sp, dcp, HfMapping{});
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(st.status().message(), HasSubstr("'" + dcp + "' exists and is not empty"));
  EXPECT_EQ(DefaultStorage()->ReadFileToString(dcp + "/keep").value(), "mine");
  EXPECT_FALSE(std::filesystem::exists(dcp + ".partial"));
  std::filesystem::remove_all(sp);
  std::filesystem::remove_all(dcp);
}

TEST(DcpWriteTest, DTypeTorch113LacksIsRefusedNamingTheKey) {
  const std::string sp = Temp("sp_u16"), dcp = Temp("dcp_u16");
  std::vector<char> v(8);
  State st;
  st.tensors.push_back(Piece("counts", DType::kU16, {4}, Box::Whole({4}), v.data()));
  std::unique_ptr<Comm> comm = MakeSingleComm();
  ASSERT_TRUE(Save(st, sp, *comm).ok());
  ExportHfOptions o;
  o.dcp_torch_major = 1;
  Result<ExportHfStats> r = ConvertToDcp(sp, dcp, HfMapping{}, o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(r.status().message(), HasSubstr("tensor 'counts'"));
  EXPECT_THAT(r.status().message(), HasSubstr("U16"));
  EXPECT_THAT(r.status().message(), HasSubstr("torch 1.13"));
  EXPECT_FALSE(std::filesystem::exists(dcp));
  EXPECT_FALSE(std::filesystem::exists(dcp + ".partial"));
  std::filesystem::remove_all(sp);
}

// torch 2.x's newer dtypes go out as torch 2.x saves them (_rebuild_tensor_v3
// of an untyped storage) and come back bit for bit, resharded; the items'
// CRC-32s verify.
TEST(DcpWriteTest, Torch2NewerDTypesRoundTripResharded) {
  const std::string sp = Temp("sp_new"), dcp = Temp("dcp_new");
  const std::vector<DType> dtypes = {DType::kU16, DType::kU32, DType::kU64, DType::kF8E4M3,
                                     DType::kF8E5M2};
  std::vector<std::vector<char>> saved, halves;
  State st;
  for (size_t k = 0; k < dtypes.size(); ++k) {
    const size_t es = DTypeSize(dtypes[k]);
    saved.push_back(RandomBytes(4 * 6 * es, 20 + static_cast<uint32_t>(k)));
    for (int r : {0, 2}) {  // saved as two row chunks
      halves.emplace_back(saved[k].begin() + r * 6 * es, saved[k].begin() + (r + 2) * 6 * es);
    }
  }
  for (size_t k = 0; k < dtypes.size(); ++k) {
    for (int h : {0, 1}) {
      st.tensors.push_back(Piece("t" + std::to_string(k), dtypes[k], {4, 6},
                                 Box{{h * 2, 0}, {2, 6}}, halves[2 * k + h].data()));
    }
  }
  std::unique_ptr<Comm> comm = MakeSingleComm();
  ASSERT_TRUE(Save(st, sp, *comm).ok());
  Result<ExportHfStats> r = ConvertToDcp(sp, dcp, HfMapping{});
  ASSERT_TRUE(r.ok()) << r.status().ToString();

  // Columns 1:5 of every row: a strip of each saved chunk.
  std::vector<std::vector<char>> got;
  State back;
  for (size_t k = 0; k < dtypes.size(); ++k) got.emplace_back(4 * 4 * DTypeSize(dtypes[k]));
  for (size_t k = 0; k < dtypes.size(); ++k) {
    back.tensors.push_back(
        Piece("t" + std::to_string(k), dtypes[k], {4, 6}, Box{{0, 1}, {4, 4}}, got[k].data()));
  }
  Result<LoadResult> lr = Load(back, dcp, *comm);
  ASSERT_TRUE(lr.ok()) << lr.status().ToString();
  for (size_t k = 0; k < dtypes.size(); ++k) {
    const size_t es = DTypeSize(dtypes[k]);
    for (int row = 0; row < 4; ++row) {
      ASSERT_EQ(
          std::memcmp(got[k].data() + row * 4 * es, saved[k].data() + (row * 6 + 1) * es, 4 * es),
          0)
          << DTypeName(dtypes[k]) << " row " << row;
    }
  }
  Result<internal_checkpoint::VerifyReport> v = VerifyDcp(DefaultStorage(), dcp);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_TRUE(v->faults.empty()) << v->faults[0].message;
  std::filesystem::remove_all(sp);
  std::filesystem::remove_all(dcp);
}

// A corrupt source chunk fails the conversion with the checksum error, and
// neither <dst> nor <dst>.partial is left behind.
// An object tagged JSON whose text json.loads would refuse cannot be written
// as its value: refused naming the key, before any file is written.
TEST(DcpWriteTest, UnwritableObjectIsRefusedBeforeAnyFile) {
  const std::string sp = Temp("sp_obj"), dcp = Temp("dcp_obj");
  std::vector<char> v(16);
  State st;
  st.tensors.push_back(Piece("w", DType::kF32, {4}, Box::Whole({4}), v.data()));
  st.objects.push_back({"good", "J{\"lr\":0.1}", {}, {}});
  st.objects.push_back({"opt.cfg", "J{\"lr\": 0.1", {}, {}});
  std::unique_ptr<Comm> comm = MakeSingleComm();
  ASSERT_TRUE(Save(st, sp, *comm).ok());
  Result<ExportHfStats> r = ConvertToDcp(sp, dcp, HfMapping{});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition) << r.status().ToString();
  EXPECT_THAT(r.status().message(), HasSubstr("object 'opt.cfg'"));
  EXPECT_FALSE(std::filesystem::exists(dcp));
  EXPECT_FALSE(std::filesystem::exists(dcp + ".partial"));
  std::filesystem::remove_all(sp);
}

TEST(DcpWriteTest, CorruptSourceFailsAndLeavesNothing) {
  const std::string sp = Temp("sp_bad"), dcp = Temp("dcp_bad");
  Saved s;
  std::vector<std::vector<char>> scratch;
  SaveFixture(sp, s, &scratch);
  bool flipped = false;
  for (const auto& e : std::filesystem::recursive_directory_iterator(sp + "/data")) {
    if (!e.is_regular_file()) continue;
    Result<std::string> b = DefaultStorage()->ReadFileToString(e.path().string());
    ASSERT_TRUE(b.ok());
    b->back() ^= 0x40;  // the last data byte of the file
    ASSERT_TRUE(DefaultStorage()->WriteStringToFile(e.path().string(), *b).ok());
    flipped = true;
  }
  ASSERT_TRUE(flipped);
  Result<ExportHfStats> r = ConvertToDcp(sp, dcp, HfMapping{});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss) << r.status().ToString();
  EXPECT_FALSE(std::filesystem::exists(dcp));
  EXPECT_FALSE(std::filesystem::exists(dcp + ".partial"));
  std::filesystem::remove_all(sp);
}

}  // namespace
}  // namespace shardpoint
