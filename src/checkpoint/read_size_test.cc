// A storage's preferred read size (src/io/read_size.h): loads and verifies
// read in requests of at least that size (an object store's GETs), found
// through wrappers; storages without one keep read_slice_bytes.
#include "src/io/read_size.h"

#include <gtest/gtest.h>

#include <atomic>
#include <numeric>

#include "shardpoint/checkpoint.h"
#include "shardpoint/verify.h"

namespace shardpoint {
namespace {

constexpr int64_t kN = int64_t{3} << 20;  // floats: 12 MiB

// A memory storage that prefers `bytes` per request and counts the reads of
// files under data/.
class PreferringStorage : public StorageWrapper, public internal_io::PreferredReadSize {
 public:
  PreferringStorage(Storage* base, uint64_t bytes) : StorageWrapper(base), bytes_(bytes) {}
  uint64_t PreferredReadBytes(const std::string&) override { return bytes_; }
  Result<std::unique_ptr<ReadableFile>> NewReadableFile(const std::string& path) override {
    SP_ASSIGN_OR_RETURN(auto f, StorageWrapper::NewReadableFile(path));
    if (path.find("/data/") == std::string::npos) return f;
    return std::unique_ptr<ReadableFile>(new Counting(std::move(f), &reads, &largest));
  }
  std::atomic<uint64_t> reads{0}, largest{0};

 private:
  class Counting : public ReadableFileWrapper {
   public:
    Counting(std::unique_ptr<ReadableFile> f, std::atomic<uint64_t>* reads,
             std::atomic<uint64_t>* largest)
        : ReadableFileWrapper(std::move(f)), reads_(reads), largest_(largest) {}
    Status ReadAt(uint64_t offset, size_t n, void* dst) const override {
      reads_->fetch_add(1);
      uint64_t l = largest_->load();
      while (n > l && !largest_->compare_exchange_weak(l, n)) {
      }
      return ReadableFileWrapper::ReadAt(offset, n, dst);
    }

   private:
    std::atomic<uint64_t>* reads_;
    std::atomic<uint64_t>* largest_;
  };
  const uint64_t bytes_;
};

State Vector(std::vector<float>* v) {
  LocalTensor t;
  t.dtype = DType::kF32;
  t.data = v->data();
  t.shape = {kN};
  t.segments.push_back(Segment{"w", {kN}, Box::Whole({kN}), {0}});
  State s;
  s.tensors.push_back(t);
  return s;
}

TEST(PreferredReadSize, FoundThroughWrappersAndAbsentOnPosix) {
  auto mem = NewMemStorage();
  PreferringStorage pref(mem.get(), 123);
  StorageWrapper outer(&pref);
  EXPECT_EQ(internal_io::PreferredReadBytes(&outer, "x"), 123u);
  EXPECT_EQ(internal_io::PreferredReadBytes(mem.get(), "x"), 0u);
  EXPECT_EQ(internal_io::PreferredReadBytes(PosixFileStorage(), "/tmp/x"), 0u);
  EXPECT_EQ(internal_io::PreferredReadBytes(DefaultStorage(), "/tmp/x"), 0u);
  EXPECT_EQ(internal_io::ReadSliceFor(&outer, "x", 1000), 1000u);
  EXPECT_EQ(internal_io::ReadSliceFor(&outer, "x", 100), 123u);
}

// 12 MiB in one chunk: 12 requests of the default 1 MiB slice without a
// preference, 2 with a preferred 8 MiB on one I/O thread, 4 of 3 MiB on four
// (each thread a share), bit for bit either way; verify too.
TEST(PreferredReadSize, LoadAndVerifyReadInThePreferredSize) {
  auto mem = NewMemStorage();
  std::vector<float> a(kN);
  std::iota(a.begin(), a.end(), 0.5f);
  auto comm = MakeSingleComm();
  SaveOptions so;
  so.storage = mem.get();
  ASSERT_TRUE(Save(Vector(&a), "ck", *comm, so).ok());
  struct Case {
    uint64_t prefer;
    int threads;
    uint64_t requests, largest;
  };
  for (Case k :
       {Case{0, 4, 12, uint64_t{1} << 20}, Case{uint64_t{8} << 20, 1, 2, uint64_t{8} << 20},
        Case{uint64_t{8} << 20, 4, 4, uint64_t{3} << 20}}) {
    const uint64_t prefer = k.prefer;
    PreferringStorage storage(mem.get(), prefer);
    std::vector<float> back(kN, 0.f);
    LoadOptions lo;
    lo.storage = &storage;
    lo.io_threads = k.threads;
    State dst = Vector(&back);
    Result<LoadResult> r = Load(dst, "ck", *comm, lo);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(back, a);
    EXPECT_EQ(r->requests, k.requests) << prefer << " " << k.threads;
    EXPECT_EQ(storage.largest.load(), k.largest) << prefer << " " << k.threads;
    storage.reads = 0;
    storage.largest = 0;
    VerifyOptions vo;  // the whole preference: verify reads a slice per thread
    vo.storage = &storage;
    Result<VerifyReport> v = VerifyCheckpoint("ck", vo);
    ASSERT_TRUE(v.ok()) << v.status().ToString();
    EXPECT_TRUE(v->ok());
    EXPECT_EQ(storage.largest.load(), prefer == 0 ? uint64_t{1} << 20 : prefer) << prefer;
  }
}

}  // namespace
}  // namespace shardpoint
