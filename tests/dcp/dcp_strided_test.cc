// The torch 1.13 DCP fixture of tensors stored with strides
// (tests/dcp/fixtures/make_strided_fixture.py: a transposed matrix, a
// permuted 3-D tensor, a view with gaps and a zero stride, views of a larger
// storage): indexed as strided views, loaded whole and resharded bit for bit.
#include <gtest/gtest.h>

#include <cstring>

#include "shardpoint/checkpoint.h"
#include "shardpoint/comm.h"
#include "src/dcp/dcp_dir.h"
#include "tests/testing/ranks.h"

using shardpoint::internal_dcp::DcpIndex;
using shardpoint::internal_dcp::ReadDcpIndex;
using shardpoint::internal_format::Manifest;

namespace shardpoint {
namespace {

std::string Fixture() {
  std::string f = __FILE__;
  std::string dir = f.substr(0, f.rfind("/tests/dcp/")) + "/tests/dcp/fixtures/torch113_strided";
  Result<bool> here = DefaultStorage()->Exists(dir + "/.metadata");
  if (!here.ok() || !*here) dir = "tests/dcp/fixtures/torch113_strided";
  return dir;
}

// The fixture's values (its generator's docstring), at a global index.
double Value(const std::string& key, const Shape& i) {
  if (key == "w_t") return 40.0 * i[1] + i[0];
  if (key == "p3") return 12.0 * i[1] + 4.0 * i[2] + i[0];
  if (key == "bcast") return 1.0 + 2.0 * i[1];
  if (key == "big_view") return 16.0 * i[0] + i[1] + 1;
  if (key == "col") return 8.0 * i[0] + 3;
  return 3.0 * i[0] + i[1];  // plain
}

struct Key {
  std::string key;
  DType dtype;
  Shape shape;
};
const std::vector<Key> kKeys = {{"w_t", DType::kF32, {40, 48}}, {"p3", DType::kI32, {4, 2, 3}},
                                {"bcast", DType::kF64, {3, 2}}, {"big_view", DType::kF32, {5, 4}},
                                {"col", DType::kBF16, {10}},    {"plain", DType::kI64, {2, 3}}};

// The bytes of element value v in dtype d.
std::string Encode(DType d, double v) {
  std::string out(DTypeSize(d), '\0');
  if (d == DType::kF32 || d == DType::kBF16) {
    const float f = static_cast<float>(v);
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    if (d == DType::kBF16) bits >>= 16;  // exact: the values are small integers
    std::memcpy(out.data(), &bits, out.size());
  } else if (d == DType::kF64) {
    std::memcpy(out.data(), &v, 8);
  } else if (d == DType::kI32) {
    const int32_t x = static_cast<int32_t>(v);
    std::memcpy(out.data(), &x, 4);
  } else {
    const int64_t x = static_cast<int64_t>(v);
    std::memcpy(out.data(), &x, 8);
  }
  return out;
}

// The row-major bytes of `box` of `k`.
std::string Expected(const Key& k, const Box& box) {
  std::string out;
  const int64_t n = box.num_elements();
  for (int64_t e = 0; e < n; ++e) {
    Shape i(box.rank());
    int64_t rest = e;
    for (size_t d = box.rank(); d-- > 0;) {
      i[d] = box.offset[d] + rest % box.shape[d];
      rest /= box.shape[d];
    }
    out += Encode(k.dtype, Value(k.key, i));
  }
  return out;
}

LocalTensor BoxOf(const Key& k, const Box& box, std::string* buf) {
  buf->assign(box.num_elements() * DTypeSize(k.dtype), '\x55');
  LocalTensor t;
  t.dtype = k.dtype;
  t.shape = box.shape;
  t.data = buf->data();
  t.segments.push_back({k.key, k.shape, box, Shape(box.rank(), 0)});
  return t;
}

TEST(DcpStridedTest, IndexesStridedItemsAsViews) {
  Result<DcpIndex> idx = ReadDcpIndex(DefaultStorage(), Fixture());
  ASSERT_TRUE(idx.ok()) << idx.status().ToString();
  const Manifest& m = idx->m;
  ASSERT_EQ(m.tensors.size(), 6u);
  ASSERT_EQ(idx->views.size(), 5u);  // all but "plain"
  for (const Key& k : kKeys) {
    const int64_t t = m.FindTensor(k.key);
    ASSERT_GE(t, 0) << k.key;
    EXPECT_EQ(m.tensors[t].shape, k.shape);
    ASSERT_EQ(m.tensors[t].chunks.size(), 1u);
    const uint32_t f = m.tensors[t].chunks[0].file;
    const bool view = m.files[f].find("\\strided@") != std::string::npos;
    EXPECT_EQ(view, k.key != "plain") << m.files[f];
  }
  const auto& wt = *std::find_if(idx->views.begin(), idx->views.end(), [&](const auto& v) {
    return m.tensors[m.FindTensor("w_t")].chunks[0].file == v.file;
  });
  EXPECT_EQ(wt.stride, (Shape{1, 40}));
  EXPECT_EQ(wt.storage_elements, 1920u);
}

TEST(DcpStridedTest, LoadsWholeTensorsBitForBit) {
  State st;
  std::vector<std::string> bufs(kKeys.size());
  for (size_t i = 0; i < kKeys.size(); ++i) {
    st.tensors.push_back(BoxOf(kKeys[i], Box::Whole(kKeys[i].shape), &bufs[i]));
  }
  std::unique_ptr<Comm> comm = MakeSingleComm();
  Result<LoadResult> r = Load(st, Fixture(), *comm);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  for (size_t i = 0; i < kKeys.size(); ++i) {
    EXPECT_EQ(bufs[i], Expected(kKeys[i], Box::Whole(kKeys[i].shape))) << kKeys[i].key;
  }
}

// Three ranks read boxes cut along every dim of each strided tensor, alone and
// cooperatively (the ranks share each stored block).
TEST(DcpStridedTest, ReshardedBoxesBitForBit) {
  auto boxes = [](int r) {
    return std::vector<Box>{
        Box({0, 16 * r}, {40, 16}),  // w_t: columns (storage rows)
        Box({r, 0, 1}, {2, 2, 2}),   // p3
        Box({r, 1}, {1, 1}),         // bcast
        Box({1 + r, 1}, {2, 3}),     // big_view
        Box({3 * r}, {4}),           // col
        Box({r % 2, r}, {1, 1}),     // plain
    };
  };
  for (bool cooperative : {false, true}) {
    SCOPED_TRACE(cooperative);
    std::vector<std::vector<std::string>> bufs(3, std::vector<std::string>(kKeys.size()));
    Status s = testing::FirstError(RunThreadRanks(3, [&](Comm& comm) -> Status {
      const int r = comm.rank();
      State st;
      for (size_t i = 0; i < kKeys.size(); ++i) {
        st.tensors.push_back(BoxOf(kKeys[i], boxes(r)[i], &bufs[r][i]));
      }
      LoadOptions o;
      o.cooperative = cooperative;
      o.read_slice_bytes = 512;  // many requests of each item
      return Load(st, Fixture(), comm, o).status();
    }));
    ASSERT_TRUE(s.ok()) << s.ToString();
    for (int r = 0; r < 3; ++r) {
      for (size_t i = 0; i < kKeys.size(); ++i) {
        EXPECT_EQ(bufs[r][i], Expected(kKeys[i], boxes(r)[i])) << r << " " << kKeys[i].key;
      }
    }
  }
}

}  // namespace
}  // namespace shardpoint
