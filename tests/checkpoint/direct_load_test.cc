// Loads with LoadOptions::direct_io from a real directory: bit for bit equal
// to what was saved, in the saved layout (into aligned and unaligned memory)
// and cut along the other dimension; and every read that reaches an O_DIRECT
// file is one request on 4096-aligned bounds (its end the file's where the
// file ends unaligned), so the kernel reads straight into the reader's memory
// with no bounce copy and no split head or tail.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "shardpoint/checkpoint.h"
#include "shardpoint/storage.h"
#include "src/io/aligned_buffer.h"

namespace shardpoint {
namespace {

using internal_io::AlignedBuffer;

struct ReadCall {
  std::string path;
  bool direct;
  uint64_t offset, n, size;
};

// Records every ReadAt of the files it opens, direct ones included.
class RecordingStorage : public StorageWrapper {
 public:
  explicit RecordingStorage(Storage* base) : StorageWrapper(base), base_(base) {}
  Result<std::unique_ptr<ReadableFile>> NewReadableFile(const std::string& path) override {
    SP_ASSIGN_OR_RETURN(auto f, StorageWrapper::NewReadableFile(path));
    return std::unique_ptr<ReadableFile>(new File(std::move(f), this));
  }
  Result<std::unique_ptr<ReadableFile>> NewDirectReadableFile(const std::string& path) override {
    SP_ASSIGN_OR_RETURN(auto f, base_->NewDirectReadableFile(path));
    return std::unique_ptr<ReadableFile>(new File(std::move(f), this));
  }
  std::vector<ReadCall> calls() {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_;
  }

 private:
  class File : public ReadableFileWrapper {
   public:
    File(std::unique_ptr<ReadableFile> base, RecordingStorage* owner)
        : ReadableFileWrapper(std::move(base)), owner_(owner) {}
    Status ReadAt(uint64_t offset, size_t n, void* dst) const override {
      Result<uint64_t> size = Size();
      {
        std::lock_guard<std::mutex> lock(owner_->mu_);
        owner_->calls_.push_back({path(), direct(), offset, n, size.ok() ? *size : 0});
      }
      return ReadableFileWrapper::ReadAt(offset, n, dst);
    }

   private:
    RecordingStorage* owner_;
  };
  Storage* const base_;
  std::mutex mu_;
  std::vector<ReadCall> calls_;
};

constexpr int kRanks = 2;
constexpr int64_t kRows = 8, kCols = 131072 + 3;  // rows of about 512 KiB of F32

float Value(int64_t i, int64_t j) { return static_cast<float>(i * 1000003 + j * 7 + 1); }

class DirectLoadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = "/tmp/shardpoint_direct_load_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    // Rank r saves a small odd-sized tensor (so the next chunk starts at an
    // unaligned offset) and rows [4r, 4r + 4) of "w".
    std::vector<Status> st = RunThreadRanks(kRanks, [&](Comm& comm) {
      const int r = comm.rank();
      std::vector<float> small(333, static_cast<float>(r)), rows(4 * kCols);
      for (int64_t i = 0; i < 4; ++i) {
        for (int64_t j = 0; j < kCols; ++j) rows[i * kCols + j] = Value(4 * r + i, j);
      }
      State s;
      LocalTensor a;
      a.data = small.data();
      a.shape = {333};
      a.segments = {Segment{"small" + std::to_string(r), {333}, Box({0}, {333}), {0}}};
      LocalTensor w;
      w.data = rows.data();
      w.shape = {4, kCols};
      w.segments = {Segment{"w", {kRows, kCols}, Box({4 * r, 0}, {4, kCols}), {0, 0}}};
      s.tensors = {a, w};
      return Save(s, dir_ + "/ck", comm).status();
    });
    for (const Status& s : st) ASSERT_TRUE(s.ok()) << s.ToString();
  }
  void TearDown() override { EXPECT_TRUE(DefaultStorage()->RemoveAll(dir_).ok()); }

  // Loads box [r0, r0 + rows) x [c0, c0 + cols) of "w" on each rank into
  // `mem` (rank r's at mem[r], `skew` bytes past an aligned address).
  void LoadBoxes(RecordingStorage* storage, bool by_columns, size_t skew) {
    std::vector<AlignedBuffer> mem;
    for (int r = 0; r < kRanks; ++r) mem.emplace_back(size_t{kRows} * kCols * 4 + 4096);
    std::vector<Status> st = RunThreadRanks(kRanks, [&](Comm& comm) {
      const int r = comm.rank();
      const int64_t rows = by_columns ? kRows : kRows / kRanks;
      const int64_t cols = by_columns ? kCols / kRanks + (r == 0 ? kCols % kRanks : 0) : kCols;
      const int64_t r0 = by_columns ? 0 : rows * r, c0 = by_columns ? (kCols - cols) * r : 0;
      float* dst = reinterpret_cast<float*>(mem[r].data() + skew);
      std::memset(dst, 0xff, static_cast<size_t>(rows * cols * 4));
      LocalTensor w;
      w.data = dst;
      w.shape = {rows, cols};
      w.segments = {Segment{"w", {kRows, kCols}, Box({r0, c0}, {rows, cols}), {0, 0}}};
      State s;
      s.tensors = {w};
      LoadOptions o;
      o.storage = storage;
      o.direct_io = true;
      o.cooperative = false;
      o.allow_unexpected_keys = true;
      SP_RETURN_IF_ERROR(Load(s, dir_ + "/ck", comm, o).status());
      for (int64_t i = 0; i < rows; ++i) {
        for (int64_t j = 0; j < cols; ++j) {
          if (dst[i * cols + j] != Value(r0 + i, c0 + j)) {
            return DataLossError("rank " + std::to_string(r) + " element [" +
                                 std::to_string(r0 + i) + ", " + std::to_string(c0 + j) + "]");
          }
        }
      }
      return OkStatus();
    });
    for (const Status& s : st) EXPECT_TRUE(s.ok()) << s.ToString();
  }

  std::string dir_;
};

TEST_F(DirectLoadTest, ReadsAreAlignedRequestsAndLoadTheSavedBytes) {
  bool any_direct = false;
  for (const bool by_columns : {false, true}) {
    for (const size_t skew : {size_t{0}, size_t{16}}) {
      SCOPED_TRACE((by_columns ? "columns, skew " : "rows, skew ") + std::to_string(skew));
      RecordingStorage storage(DefaultStorage());
      LoadBoxes(&storage, by_columns, skew);
      int data_reads = 0;
      for (const ReadCall& c : storage.calls()) {
        if (c.path.find("/data/") == std::string::npos) continue;
        ++data_reads;
        if (!c.direct) continue;
        any_direct = true;
        EXPECT_EQ(c.offset % 4096, 0u) << c.path << " at " << c.offset << " + " << c.n;
        EXPECT_TRUE((c.offset + c.n) % 4096 == 0 || c.offset + c.n == c.size)
            << c.path << " at " << c.offset << " + " << c.n << " of " << c.size;
      }
      EXPECT_GT(data_reads, 0);
    }
  }
  if (!any_direct) GTEST_SKIP() << "/tmp refuses O_DIRECT: only the bytes were checked";
}

}  // namespace
}  // namespace shardpoint
