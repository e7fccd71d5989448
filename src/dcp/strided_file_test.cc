#include "src/dcp/strided_file.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <random>

namespace shardpoint::internal_dcp {
namespace {

// An in-memory file that counts what is read from it.
class CountingFile : public ReadableFile {
 public:
  explicit CountingFile(std::string bytes) : bytes_(std::move(bytes)) {}
  Status ReadAt(uint64_t offset, size_t n, void* dst) const override {
    if (offset > bytes_.size() || n > bytes_.size() - offset) return DataLossError("short read");
    std::memcpy(dst, bytes_.data() + offset, n);
    read_ += n;
    ++requests_;
    return OkStatus();
  }
  Result<uint64_t> Size() const override { return bytes_.size(); }
  const std::string& path() const override { return path_; }
  uint64_t read() const { return read_; }
  uint64_t requests() const { return requests_; }

 private:
  std::string bytes_, path_ = "base";
  mutable std::atomic<uint64_t> read_{0}, requests_{0};
};

// A file of `prefix` junk bytes, then `elements` storage elements of `es`
// bytes, element k holding bytes (k * es + b) * 7 + 1.
std::string StorageFile(uint64_t prefix, uint64_t elements, uint32_t es) {
  std::string s(prefix, '\xEE');
  for (uint64_t i = 0; i < elements * es; ++i) s.push_back(static_cast<char>(i * 7 + 1));
  return s;
}

// The row-major bytes of the view, element by element (the reference).
std::string Reference(const StridedView& v, const std::string& file) {
  int64_t n = 1;
  for (int64_t d : v.size) n *= d;
  std::string out;
  for (int64_t e = 0; e < n; ++e) {
    uint64_t pos = v.first;
    int64_t rest = e;
    for (size_t d = v.size.size(); d-- > 0;) {
      pos += static_cast<uint64_t>((rest % v.size[d]) * v.stride[d]);
      rest /= v.size[d];
    }
    out.append(file, v.storage_offset + pos * v.element_size, v.element_size);
  }
  return out;
}

StridedView View(Shape size, Shape stride, uint64_t first, uint64_t elements, uint32_t es) {
  StridedView v;
  v.storage_offset = 5;
  v.storage_elements = elements;
  v.element_size = es;
  v.first = first;
  v.size = std::move(size);
  v.stride = std::move(stride);
  return v;
}

// A view opened over its storage file, counting what it reads there.
struct OpenView {
  explicit OpenView(const StridedView& v)
      : file(StorageFile(v.storage_offset, v.storage_elements, v.element_size)),
        want(Reference(v, file)),
        base(file),
        f(OpenStridedView(v, &base, "view")) {}
  const std::string file, want;  // want: the view's bytes, row-major
  CountingFile base;
  std::unique_ptr<ReadableFile> f;
};

// Random layouts (permuted dims, gaps, zero strides, offsets) read in random
// byte ranges, unaligned ones included, equal the element-by-element gather.
TEST(StridedFileTest, RandomViewsReadLikeTheReference) {
  std::mt19937 rng(42);
  for (int trial = 0; trial < 200; ++trial) {
    const size_t rank = 1 + rng() % 4;
    const uint32_t es = 1u << (rng() % 4);
    Shape size(rank);
    for (int64_t& s : size) s = 1 + rng() % 5;
    // Strides: a random dim order, each dim spaced by its inner extent plus a
    // random gap; sometimes a zero stride.
    std::vector<size_t> order(rank);
    for (size_t d = 0; d < rank; ++d) order[d] = d;
    std::shuffle(order.begin(), order.end(), rng);
    Shape stride(rank);
    int64_t extent = 1 + rng() % 2;
    for (size_t d : order) {
      stride[d] = rng() % 8 == 0 ? 0 : extent;
      extent = extent * size[d] + rng() % 3;
    }
    const uint64_t first = rng() % 4;
    StridedView v = View(size, stride, first, first + extent + rng() % 3, es);
    ASSERT_TRUE(CheckStridedView(v, "x").ok()) << CheckStridedView(v, "x").ToString();
    OpenView t(v);
    const std::string& want = t.want;
    ReadableFile* f = t.f.get();
    ASSERT_EQ(*f->Size(), want.size());
    for (int k = 0; k < 6; ++k) {
      const uint64_t a = rng() % (want.size() + 1);
      const uint64_t n = rng() % (want.size() - a + 1);
      std::string got(n, '\0');
      ASSERT_TRUE(f->ReadAt(a, n, got.data()).ok());
      ASSERT_EQ(got, want.substr(a, n)) << trial << " " << a << " " << n;
    }
    std::string all(want.size(), '\0');
    ASSERT_TRUE(f->ReadAt(0, all.size(), all.data()).ok());
    EXPECT_EQ(all, want);
    std::string past(1, '\0');
    EXPECT_EQ(f->ReadAt(want.size(), 1, past.data()).code(), StatusCode::kDataLoss);
  }
}

// A transposed (64, 48) float32 matrix read row-major in 1 KiB requests reads
// its storage once, in one request; a read of elements that lie in a band of
// the storage reads that band (and an eighth ahead) alone.
TEST(StridedFileTest, ReadsTheStorageOnceAndBandsAlone) {
  {
    OpenView t(View({64, 48}, {1, 64}, 0, 64 * 48, 4));
    std::string got(t.want.size(), '\0');
    for (uint64_t a = 0; a < t.want.size(); a += 1024) {
      ASSERT_TRUE(t.f->ReadAt(a, std::min<uint64_t>(1024, t.want.size() - a), got.data() + a).ok());
    }
    EXPECT_EQ(got, t.want);
    EXPECT_EQ(t.base.read(), 64u * 48 * 4);
    EXPECT_EQ(t.base.requests(), 1u);
  }
  {
    // A (4, 16, 12) storage permuted to (4, 12, 16): the view's [2] is the
    // storage's [2], 192 contiguous elements, and is all that is read.
    OpenView t(View({4, 12, 16}, {192, 1, 12}, 0, 4 * 192, 4));
    std::string got(192 * 4, '\0');
    ASSERT_TRUE(t.f->ReadAt(2 * 192 * 4, got.size(), got.data()).ok());
    EXPECT_EQ(got, t.want.substr(2 * 192 * 4, got.size()));
    EXPECT_EQ(t.base.read(), (192 + 191 / 8 + 1) * 4);  // the band and an eighth ahead
    // The next elements' runs, each 16 elements of the band, hit that read.
    for (int i = 0; i < 12; ++i) {
      ASSERT_TRUE(t.f->ReadAt((2 * 192 + 16 * i) * 4, 64, got.data()).ok());
    }
    EXPECT_EQ(t.base.requests(), 1u);
  }
}

// The slices of a part come from the I/O threads in any order. The rows of
// a `.t()` matrix each span almost its whole storage; read last slice first,
// each slice missed the span cached by the one before and read the storage
// again (4 slices: 4x). Overlapping spans now read what the cache lacks.
TEST(StridedFileTest, SlicesInAnyOrderReadTheStorageOnce) {
  OpenView t(View({64, 128}, {1, 64}, 0, 64 * 128, 4));
  const uint64_t slice = 8 * 128 * 4;  // rows [8i, 8i + 8) of the band rows [0, 32)
  std::string got(4 * slice, '\0');
  for (uint64_t i = 4; i-- > 0;) {
    ASSERT_TRUE(t.f->ReadAt(i * slice, slice, got.data() + i * slice).ok());
  }
  EXPECT_EQ(got, t.want.substr(0, got.size()));
  EXPECT_EQ(t.base.read(), 64u * 128 * 4);  // the storage once, no more
  // Disjoint spans still replace the cache: the view reads what it needs.
  OpenView p(View({4, 12, 16}, {192, 1, 12}, 0, 4 * 192, 4));
  std::string band(192 * 4, '\0');
  for (uint64_t b : {3, 0}) {
    ASSERT_TRUE(p.f->ReadAt(b * 192 * 4, band.size(), band.data()).ok());
    EXPECT_EQ(band, p.want.substr(b * 192 * 4, band.size()));
  }
  EXPECT_EQ(p.base.read(), (192 + (192 + 191 / 8 + 1)) * 4);
}

TEST(StridedFileTest, ChecksBoundsAndStrides) {
  EXPECT_TRUE(CheckStridedView(View({3, 4}, {1, 3}, 0, 12, 4), "x").ok());
  Status s = CheckStridedView(View({3, 4}, {1, 3}, 1, 12, 4), "'w'");
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("reaches past its storage of 12"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("'w'"), std::string::npos);
  s = CheckStridedView(View({3, 4}, {-1, 3}, 5, 12, 4), "x");
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("negative"), std::string::npos) << s.ToString();
  s = CheckStridedView(View({2, 2}, {int64_t{1} << 62, int64_t{1} << 62}, 0, 12, 4), "x");
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.ToString();
}

TEST(StridedFileTest, EncodesAndDecodesViews) {
  StridedView a = View({3, 4}, {1, 3}, 0, 12, 4);
  a.file = 2;
  a.base = 0;
  StridedView b = View({5}, {2}, 1, 11, 2);
  b.file = 3;
  b.base = 1;
  internal_base::ByteWriter w;
  EncodeStridedViews({a, b}, &w);
  {
    internal_base::ByteReader r(w.str(), "t");
    Result<std::vector<StridedView>> got = DecodeStridedViews(&r, 4, "t");
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    ASSERT_EQ(got->size(), 2u);
    EXPECT_EQ((*got)[1].stride, (Shape{2}));
    EXPECT_EQ((*got)[1].first, 1u);
    EXPECT_TRUE(r.done());
  }
  {  // File 3 is out of range for 3 files.
    internal_base::ByteReader r(w.str(), "t");
    EXPECT_EQ(DecodeStridedViews(&r, 3, "t").status().code(), StatusCode::kDataLoss);
  }
  b.base = 2;  // a view of a view
  internal_base::ByteWriter w2;
  EncodeStridedViews({a, b}, &w2);
  internal_base::ByteReader r(w2.str(), "t");
  Result<std::vector<StridedView>> got = DecodeStridedViews(&r, 4, "t");
  EXPECT_EQ(got.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(got.status().message().find("itself a view"), std::string::npos);
}

}  // namespace
}  // namespace shardpoint::internal_dcp
