// Block checksums (format v2) end to end on the real filesystem: a flipped
// byte anywhere in a data file fails every resharded load (along each dim,
// plain and cooperative) naming the key, chunk, file and the byte range of
// the block that covers it; clean loads are bit for bit and make few
// requests; a version-1 checkpoint (no block checksums) still loads and
// verifies, whole chunks at a time.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>

#include "shardpoint/checkpoint.h"
#include "shardpoint/verify.h"
#include "src/checkpoint/verify.h"
#include "src/format/manifest.h"
#include "src/source/manifest_read.h"
#include "tests/testing/counting_storage.h"
#include "tests/testing/forwarding_comm.h"
#include "tests/testing/ranks.h"

namespace shardpoint {
namespace {

using internal_format::ChunkRecord;
using internal_format::Manifest;
using internal_format::TensorRecord;
using testing::Arena;
using testing::CountingStorage;
using testing::ForwardingComm;
using testing::LoadRanks;
using testing::SaveRanks;
using testing::StatesOf;
using testing::TestRank;

// Records which byte ranges of which files one rank read.
class RecordingStorage : public StorageWrapper {
 public:
  explicit RecordingStorage(Storage* base) : StorageWrapper(base) {}
  struct Read {
    std::string path;
    uint64_t offset, n;
  };
  // Reads come from the rank's thread (manifest, headers) and its I/O
  // threads at once: guarded.
  bool ReadByte(const std::string& suffix, uint64_t at) const {
    std::lock_guard<std::mutex> lock(mu_);
    for (const Read& r : reads_) {
      if (r.path.size() >= suffix.size() &&
          r.path.compare(r.path.size() - suffix.size(), suffix.size(), suffix) == 0 &&
          r.offset <= at && at < r.offset + r.n) {
        return true;
      }
    }
    return false;
  }

  Result<std::unique_ptr<ReadableFile>> NewReadableFile(const std::string& p) override {
    SP_ASSIGN_OR_RETURN(std::unique_ptr<ReadableFile> f, base()->NewReadableFile(p));
    return std::unique_ptr<ReadableFile>(new File(std::move(f), this, p));
  }

 private:
  class File : public ReadableFileWrapper {
   public:
    File(std::unique_ptr<ReadableFile> f, RecordingStorage* s, std::string path)
        : ReadableFileWrapper(std::move(f)), s_(s), path_(std::move(path)) {}
    Status ReadAt(uint64_t offset, size_t n, void* dst) const override {
      s_->Record({path_, offset, n});
      return ReadableFileWrapper::ReadAt(offset, n, dst);
    }

   private:
    RecordingStorage* s_;
    std::string path_;
  };
  void Record(Read r) {
    std::lock_guard<std::mutex> lock(mu_);
    reads_.push_back(std::move(r));
  }
  mutable std::mutex mu_;
  std::vector<Read> reads_;
};

// Logs, in order, every Prefetch hint and every read of a data file.
class PrefetchLogStorage : public StorageWrapper {
 public:
  explicit PrefetchLogStorage(Storage* base) : StorageWrapper(base) {}
  struct Event {
    bool prefetch;
    std::string path;
    uint64_t offset, n;
  };

  Result<std::unique_ptr<ReadableFile>> NewReadableFile(const std::string& p) override {
    SP_ASSIGN_OR_RETURN(std::unique_ptr<ReadableFile> f, base()->NewReadableFile(p));
    return std::unique_ptr<ReadableFile>(new File(std::move(f), this, p));
  }
  std::vector<Event> events() {
    std::lock_guard<std::mutex> lock(mu_);
    return events_;
  }
  void Clear() {
    std::lock_guard<std::mutex> lock(mu_);
    events_.clear();
  }
  std::atomic<bool> throw_on_prefetch{false};  // a user's Storage whose hint throws

  // Fails unless every read of tensor bytes (of the files in `data_start`,
  // path suffix -> offset of the file's first chunk; not the headers) lies
  // inside what was announced for that file before it, no hint is longer
  // than `window`, and there is at least one hint.
  ::testing::AssertionResult EveryReadAnnouncedBefore(
      uint64_t window, const std::map<std::string, uint64_t>& data_start) {
    std::vector<Event> ev = events();
    int hints = 0;
    for (size_t i = 0; i < ev.size(); ++i) {
      const std::string& path = ev[i].path;
      auto file = std::find_if(data_start.begin(), data_start.end(), [&](const auto& f) {
        return path.size() >= f.first.size() &&
               path.compare(path.size() - f.first.size(), f.first.size(), f.first) == 0;
      });
      if (file == data_start.end() || (!ev[i].prefetch && ev[i].offset < file->second)) continue;
      if (ev[i].prefetch) {
        ++hints;
        if (ev[i].n > window || ev[i].n == 0) {
          return ::testing::AssertionFailure() << "hint of " << ev[i].n << " bytes";
        }
        continue;
      }
      const uint64_t at = Covered(ev, i, ev[i], true);
      if (at < ev[i].offset + ev[i].n) {
        return ::testing::AssertionFailure()
               << path << " read [" << ev[i].offset << ", " << ev[i].offset + ev[i].n
               << ") not announced from " << at;
      }
    }
    if (hints == 0) return ::testing::AssertionFailure() << "no hints";
    return ::testing::AssertionSuccess();
  }
  // Fails unless every announced byte is read (a hint never makes the
  // storage fetch bytes the load does not read).
  ::testing::AssertionResult EveryHintRead() {
    std::vector<Event> ev = events();
    for (const Event& h : ev) {
      const uint64_t at = h.prefetch ? Covered(ev, ev.size(), h, false) : h.offset + h.n;
      if (at < h.offset + h.n) {
        return ::testing::AssertionFailure() << h.path << " hint [" << h.offset << ", "
                                             << h.offset + h.n << ") not read from " << at;
      }
    }
    return ::testing::AssertionSuccess();
  }
  int hints() {
    int n = 0;
    for (const Event& e : events()) n += e.prefetch;
    return n;
  }

 private:
  // Walks the bytes of `e` through the events before index `limit` of the
  // same file that are hints (`hints`) or reads; returns the first byte
  // none of them covers (e's end if all are covered).
  static uint64_t Covered(const std::vector<Event>& ev, size_t limit, const Event& e, bool hints) {
    uint64_t at = e.offset;
    for (bool moved = true; at < e.offset + e.n && moved;) {
      moved = false;
      for (size_t j = 0; j < limit; ++j) {
        const Event& c = ev[j];
        if (c.prefetch == hints && c.path == e.path && c.offset <= at && at < c.offset + c.n) {
          at = c.offset + c.n;
          moved = true;
        }
      }
    }
    return at;
  }
  void Log(Event e) {
    std::lock_guard<std::mutex> lock(mu_);
    events_.push_back(std::move(e));
  }
  class File : public ReadableFileWrapper {
   public:
    File(std::unique_ptr<ReadableFile> f, PrefetchLogStorage* s, std::string path)
        : ReadableFileWrapper(std::move(f)), s_(s), path_(std::move(path)) {}
    Status ReadAt(uint64_t offset, size_t n, void* dst) const override {
      s_->Log({false, path_, offset, n});
      return ReadableFileWrapper::ReadAt(offset, n, dst);
    }
    void Prefetch(uint64_t offset, size_t n) const override {
      if (s_->throw_on_prefetch) throw std::runtime_error("no hints here");
      s_->Log({true, path_, offset, n});
      ReadableFileWrapper::Prefetch(offset, n);  // the POSIX hint itself
    }

   private:
    PrefetchLogStorage* s_;
    std::string path_;
  };
  std::mutex mu_;
  std::vector<Event> events_;
};

struct Spec {
  std::string key;
  Shape shape;
  DType dtype;
};

// Three tensors, chunks of 0.75 to 1.5 MiB (one to two 1 MiB blocks).
const std::vector<Spec> kSpecs = {
    {"a", {1024, 640}, DType::kF32},    // 2.5 MiB
    {"b", {48, 64, 256}, DType::kF32},  // 3 MiB
    {"c", {1536, 512}, DType::kBF16},   // 1.5 MiB
};

uint8_t ByteOf(const std::string& key, int64_t i) {
  return static_cast<uint8_t>((i * 2654435761u + key[0] * 97u) >> 7);
}

// Rank `part` of `parts` holds the slab of every tensor along dim `dim`
// (dims past a tensor's rank use its last dim), filled with ByteOf at the
// global row-major byte index.
void Build(TestRank* r, int dim, int part, int parts, bool fill) {
  for (const Spec& s : kSpecs) {
    const size_t d = std::min<size_t>(dim, s.shape.size() - 1);
    Box box = Box::Whole(s.shape);
    const int64_t n = s.shape[d];
    box.offset[d] = n * part / parts;
    box.shape[d] = n * (part + 1) / parts - box.offset[d];
    LocalTensor t;
    t.dtype = s.dtype;
    t.shape = box.shape;
    t.data = r->arena.Alloc(box.num_elements(), s.dtype);
    t.segments.push_back({s.key, s.shape, box, Shape(s.shape.size(), 0)});
    if (fill) {
      // Global element index of local element e, then its bytes.
      const int64_t es = DTypeSize(s.dtype);
      char* out = static_cast<char*>(t.data);
      Shape idx(box.rank(), 0);
      for (int64_t e = 0; e < box.num_elements(); ++e) {
        int64_t g = 0;
        for (size_t k = 0; k < box.rank(); ++k) g = g * s.shape[k] + box.offset[k] + idx[k];
        for (int64_t b = 0; b < es; ++b)
          out[e * es + b] = static_cast<char>(ByteOf(s.key, g * es + b));
        for (size_t k = box.rank(); k-- > 0;) {
          if (++idx[k] < box.shape[k]) break;
          idx[k] = 0;
        }
      }
    }
    r->state.tensors.push_back(std::move(t));
  }
}

// Checks every byte rank r loaded against ByteOf.
::testing::AssertionResult Loaded(TestRank& r) {
  for (size_t i = 0; i < kSpecs.size(); ++i) {
    const Spec& s = kSpecs[i];
    const LocalTensor& t = r.state.tensors[i];
    const Box& box = t.segments[0].global_box;
    const int64_t es = DTypeSize(s.dtype);
    const char* in = static_cast<const char*>(t.data);
    Shape idx(box.rank(), 0);
    for (int64_t e = 0; e < box.num_elements(); ++e) {
      int64_t g = 0;
      for (size_t k = 0; k < box.rank(); ++k) g = g * s.shape[k] + box.offset[k] + idx[k];
      for (int64_t b = 0; b < es; ++b) {
        if (static_cast<uint8_t>(in[e * es + b]) != ByteOf(s.key, g * es + b)) {
          return ::testing::AssertionFailure() << s.key << " element " << g << " byte " << b;
        }
      }
      for (size_t k = box.rank(); k-- > 0;) {
        if (++idx[k] < box.shape[k]) break;
        idx[k] = 0;
      }
    }
  }
  return ::testing::AssertionSuccess();
}

class BlockChecksumTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/shardpoint_blocks_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    dir_ = root_ + "/ckpt";
    // Saved by 2 ranks split along dim 0.
    std::vector<TestRank> src(2);
    for (int r = 0; r < 2; ++r) Build(&src[r], 0, r, 2, true);
    ASSERT_TRUE(SaveRanks(StatesOf(src), dir_).ok());
    Result<Manifest> m = internal_source::ReadManifest(DefaultStorage(), dir_);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    manifest_ = std::move(*m);
  }
  void TearDown() override { ASSERT_TRUE(DefaultStorage()->RemoveAll(root_).ok()); }

  // "/data/N.safetensors" -> the offset of its first chunk.
  std::map<std::string, uint64_t> DataStarts() const {
    std::map<std::string, uint64_t> out;
    for (const TensorRecord& t : manifest_.tensors) {
      for (const ChunkRecord& c : t.chunks) {
        const std::string f = "/" + manifest_.files[c.file];
        out[f] = out.count(f) ? std::min(out[f], c.offset) : c.offset;
      }
    }
    return out;
  }

  // Loads every tensor with `world` ranks, rank r taking part r % parts along
  // `dim`. Returns the agreed status; fills results.
  Status LoadAlong(int dim, int parts, int world, bool cooperative,
                   std::vector<LoadResult>* results = nullptr, Storage* storage = nullptr,
                   bool check = true, uint64_t slice = 0, uint64_t prefetch = UINT64_MAX) {
    std::vector<TestRank> dst(world);
    for (int r = 0; r < world; ++r) Build(&dst[r], dim, r % parts, parts, false);
    LoadOptions o;
    o.cooperative = cooperative;
    o.storage = storage;
    if (slice) o.read_slice_bytes = slice;
    if (prefetch != UINT64_MAX) o.prefetch_bytes = prefetch;
    Status s = LoadRanks(StatesOf(dst), dir_, o, results);
    for (int r = 0; s.ok() && check && r < world; ++r) EXPECT_TRUE(Loaded(dst[r])) << "rank " << r;
    return s;
  }

  void FlipByte(const std::string& file, uint64_t at) {
    FILE* f = std::fopen((dir_ + "/" + file).c_str(), "r+b");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(std::fseek(f, static_cast<long>(at), SEEK_SET), 0);
    int c = std::fgetc(f);
    ASSERT_EQ(std::fseek(f, static_cast<long>(at), SEEK_SET), 0);
    std::fputc(c ^ 0x10, f);
    std::fclose(f);
  }

  // Rewrites the manifest as format version 1 (no block checksums).
  void MakeVersion1() {
    Manifest m = manifest_;
    m.version = 1;
    m.block_size = 0;
    for (TensorRecord& t : m.tensors) {
      for (ChunkRecord& c : t.chunks) c.block_sums.clear();
    }
    ASSERT_TRUE(DefaultStorage()
                    ->WriteStringToFile(dir_ + "/manifest", internal_format::EncodeManifest(m))
                    .ok());
    Result<Manifest> back = internal_source::ReadManifest(DefaultStorage(), dir_);
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    ASSERT_EQ(back->version, 1u);
    manifest_ = std::move(*back);
  }

  // Flips seeded random bytes, one at a time, and expects every load along
  // every dim (plain: 3 ranks, requests of one block and of up to 4 blocks;
  // cooperative: 4 ranks, 2 copies of each part) to fail naming the key,
  // chunk, file and the covering block's range.
  void FlipsFailEveryLoad(uint32_t seed, int flips) {
    std::mt19937_64 rng(seed);
    for (int f = 0; f < flips; ++f) {
      const size_t ti = rng() % manifest_.tensors.size();
      const TensorRecord& t = manifest_.tensors[ti];
      const size_t ci = rng() % t.chunks.size();
      const ChunkRecord& c = t.chunks[ci];
      const uint64_t rel = rng() % c.nbytes;
      const uint64_t block = internal_format::VerifyBlock(manifest_, c);
      const uint64_t b0 = rel / block * block, b1 = std::min(c.nbytes, b0 + block);
      const std::string range =
          "bytes [" + std::to_string(c.offset + b0) + ", " + std::to_string(c.offset + b1) + ")";
      SCOPED_TRACE(t.key + " chunk " + std::to_string(ci) + " byte " + std::to_string(rel));
      FlipByte(manifest_.files[c.file], c.offset + rel);
      for (int dim = 0; dim < 3; ++dim) {
        for (int mode = 0; mode < 3; ++mode) {
          const bool coop = mode == 1;
          SCOPED_TRACE("dim " + std::to_string(dim) +
                       (coop        ? " cooperative"
                        : mode == 2 ? " plain, 4 MiB requests"
                                    : " plain"));
          Status s = coop        ? LoadAlong(dim, 2, 4, true)
                     : mode == 2 ? LoadAlong(dim, 3, 3, false, nullptr, nullptr, true, 4 << 20)
                                 : LoadAlong(dim, 3, 3, false);
          ASSERT_EQ(s.code(), StatusCode::kDataLoss) << s.ToString();
          EXPECT_NE(s.message().find("tensor '" + t.key + "' chunk " + std::to_string(ci)),
                    std::string::npos)
              << s.message();
          EXPECT_NE(s.message().find(manifest_.files[c.file]), std::string::npos) << s.message();
          EXPECT_NE(s.message().find(range), std::string::npos) << s.message() << " want " << range;
        }
      }
      Result<internal_checkpoint::VerifyReport> v = internal_checkpoint::VerifyCheckpoint(
          DefaultStorage(), dir_, internal_checkpoint::VerifyOptions{});
      ASSERT_TRUE(v.ok());
      ASSERT_EQ(v->faults.size(), 1u);
      EXPECT_NE(v->faults[0].message.find(range), std::string::npos) << v->faults[0].message;
      FlipByte(manifest_.files[c.file], c.offset + rel);  // restore
      ASSERT_TRUE(LoadAlong(1, 3, 3, false).ok());
    }
  }

  std::string root_, dir_;
  Manifest manifest_;
};

TEST_F(BlockChecksumTest, SavesVersion2WithBlockChecksums) {
  EXPECT_EQ(manifest_.version, 2u);
  EXPECT_EQ(manifest_.block_size, internal_format::kDefaultBlockSize);
  for (const TensorRecord& t : manifest_.tensors) {
    for (const ChunkRecord& c : t.chunks) {
      EXPECT_EQ(c.block_sums.size(), internal_format::NumBlocks(c.nbytes, manifest_.block_size));
    }
  }
}

TEST_F(BlockChecksumTest, ReshardedLoadsAreExactAlongEveryDim) {
  for (int dim = 0; dim < 3; ++dim) {
    for (int parts : {1, 3, 4}) {
      SCOPED_TRACE("dim " + std::to_string(dim) + " parts " + std::to_string(parts));
      ASSERT_TRUE(LoadAlong(dim, parts, parts, false).ok());
      ASSERT_TRUE(LoadAlong(dim, parts, 2 * parts, true).ok());
    }
  }
}

TEST_F(BlockChecksumTest, FlippedByteFailsEveryResharding) { FlipsFailEveryLoad(14, 6); }

TEST_F(BlockChecksumTest, CooperativeLoadReadsEachNeededBlockOnce) {
  // Saved along dim 0 by 2 ranks; loaded along every dim by 2-4 ranks (and
  // with two replicas of each part): the ranks together read each stored
  // block once (every stored byte is needed here) and each about 1/N of
  // them, where reading alone makes every rank read the blocks covering its
  // strips (along dims 1 and 2: every block).
  uint64_t stored = 0;
  for (const TensorRecord& t : manifest_.tensors) {
    for (const ChunkRecord& c : t.chunks) stored += c.nbytes;
  }
  for (int dim = 0; dim < 3; ++dim) {
    for (auto [parts, copies] : {std::pair{2, 1}, {3, 1}, {4, 1}, {3, 2}}) {
      SCOPED_TRACE("dim " + std::to_string(dim) + " parts " + std::to_string(parts) + " copies " +
                   std::to_string(copies));
      const int world = parts * copies;
      std::vector<LoadResult> res;
      ASSERT_TRUE(LoadAlong(dim, parts, world, true, &res).ok());
      uint64_t read = 0, needed = 0, received = 0;
      for (int r = 0; r < world; ++r) {
        read += res[r].bytes_read;
        needed += res[r].bytes_needed;
        received += res[r].bytes_received;
        // Balanced to within one span of the largest chunk (1.5 MiB).
        EXPECT_LE(res[r].bytes_read, stored / world + (uint64_t{3} << 19)) << "rank " << r;
      }
      EXPECT_EQ(read, stored);
      EXPECT_EQ(needed, stored);
      // Only the same layout (dim 0, 2 parts) needs nothing from another rank.
      EXPECT_EQ(received == 0, dim == 0 && parts == 2 && copies == 1) << received;
      if (dim > 0 && parts == 3 && copies == 1) {
        ASSERT_TRUE(LoadAlong(dim, parts, world, false, &res).ok());
        uint64_t alone = 0;
        for (const LoadResult& r : res) alone += r.bytes_read;
        EXPECT_EQ(alone, parts * stored);
      }
    }
  }
}

TEST_F(BlockChecksumTest, FlipInABlockReadForAnotherRankFailsEveryRank) {
  // Loaded along dim 1 by 3 ranks, every block is needed by every rank and
  // read by one: a flipped byte is detected by the rank that reads its block
  // and every rank fails with that error, naming key, chunk, file and range.
  std::mt19937_64 rng(20261123);
  for (int trial = 0; trial < 4; ++trial) {
    const TensorRecord& t = manifest_.tensors[rng() % manifest_.tensors.size()];
    const size_t ci = rng() % t.chunks.size();
    const ChunkRecord& c = t.chunks[ci];
    const uint64_t rel = rng() % c.nbytes;
    const uint64_t b0 = rel / manifest_.block_size * manifest_.block_size;
    const uint64_t b1 = std::min(c.nbytes, b0 + manifest_.block_size);
    const std::string range =
        "bytes [" + std::to_string(c.offset + b0) + ", " + std::to_string(c.offset + b1) + ")";
    SCOPED_TRACE(t.key + " chunk " + std::to_string(ci) + " byte " + std::to_string(rel));
    FlipByte(manifest_.files[c.file], c.offset + rel);

    constexpr int kWorld = 3;
    std::vector<TestRank> dst(kWorld);
    std::vector<std::unique_ptr<RecordingStorage>> storage;
    for (int r = 0; r < kWorld; ++r) {
      Build(&dst[r], 1, r, kWorld, false);
      storage.push_back(std::make_unique<RecordingStorage>(DefaultStorage()));
    }
    const std::vector<Status> st = RunThreadRanks(kWorld, [&](Comm& comm) {
      LoadOptions o;
      o.io_threads = 1;
      o.storage = storage[comm.rank()].get();
      return Load(dst[comm.rank()].state, dir_, comm, o).status();
    });
    int readers = 0, reader = -1;
    for (int r = 0; r < kWorld; ++r) {
      if (storage[r]->ReadByte(manifest_.files[c.file], c.offset + rel)) {
        ++readers;
        reader = r;
      }
    }
    ASSERT_EQ(readers, 1) << "the flipped block is read by exactly one rank";
    for (int r = 0; r < kWorld; ++r) {
      SCOPED_TRACE("rank " + std::to_string(r));
      ASSERT_EQ(st[r].code(), StatusCode::kDataLoss) << st[r].ToString();
      EXPECT_NE(st[r].message().find("rank " + std::to_string(reader) + ": "), std::string::npos)
          << st[r].message();
      EXPECT_NE(st[r].message().find("tensor '" + t.key + "' chunk " + std::to_string(ci)),
                std::string::npos)
          << st[r].message();
      EXPECT_NE(st[r].message().find(manifest_.files[c.file]), std::string::npos);
      EXPECT_NE(st[r].message().find(range), std::string::npos) << st[r].message();
    }
    FlipByte(manifest_.files[c.file], c.offset + rel);  // restore
  }
  ASSERT_TRUE(LoadAlong(1, 3, 3, true).ok());
}

TEST_F(BlockChecksumTest, Version1StillLoadsAndVerifiesWholeChunks) {
  MakeVersion1();
  ASSERT_TRUE(LoadAlong(1, 3, 3, false).ok());
  ASSERT_TRUE(LoadAlong(0, 4, 4, false).ok());
  FlipsFailEveryLoad(1, 3);
}

TEST_F(BlockChecksumTest, UnverifiedLoadReadsOnlyNeededBytes) {
  // With verification off and no gap bridging, a load along dim 0 reads
  // exactly its bytes; with verification on, whole blocks.
  std::vector<TestRank> dst(3);
  for (int r = 0; r < 3; ++r) Build(&dst[r], 0, r, 3, false);
  LoadOptions o;
  o.verify_checksums = false;
  o.read_gap_bytes = 0;
  o.cooperative = false;
  std::vector<LoadResult> res;
  ASSERT_TRUE(LoadRanks(StatesOf(dst), dir_, o, &res).ok());
  for (int r = 0; r < 3; ++r) {
    EXPECT_TRUE(Loaded(dst[r]));
    EXPECT_EQ(res[r].bytes_read, res[r].bytes_needed) << "rank " << r;
  }
}

TEST_F(BlockChecksumTest, UnverifiedStripsAreReadPerUnitNotPerRow) {
  // Verification off (as for DCP and HF sources), cut along dims 1 and 2:
  // each rank needs a strip of every row. Runs inside one 1 MiB unit of a
  // chunk are read by one request, so a rank makes a few requests per unit
  // (two files of 3.5 MiB: at most 8 units, 6 chunks), not one per row
  // (1024 + 1536 rows); bit for bit. With read_gap_bytes 0 it reads only
  // its bytes, in one request per strip.
  for (int dim = 1; dim < 3; ++dim) {
    for (uint64_t gap : {uint64_t{256} << 10, uint64_t{0}}) {
      std::vector<TestRank> dst(3);
      for (int r = 0; r < 3; ++r) Build(&dst[r], dim, r, 3, false);
      CountingStorage counting(DefaultStorage());
      LoadOptions o;
      o.verify_checksums = false;
      o.cooperative = false;
      o.read_gap_bytes = gap;
      o.storage = &counting;
      std::vector<LoadResult> res;
      ASSERT_TRUE(LoadRanks(StatesOf(dst), dir_, o, &res).ok());
      for (int r = 0; r < 3; ++r) {
        EXPECT_TRUE(Loaded(dst[r])) << "dim " << dim << " rank " << r;
        if (gap) {
          EXPECT_LE(res[r].requests, 16u) << "dim " << dim << " rank " << r;
          EXPECT_LE(res[r].bytes_read, 2 * (uint64_t{7} << 19)) << "dim " << dim;
        } else {
          EXPECT_GT(res[r].requests, 1000u) << "dim " << dim << " rank " << r;
          EXPECT_EQ(res[r].bytes_read, res[r].bytes_needed) << "dim " << dim << " rank " << r;
        }
      }
    }
  }
}

TEST_F(BlockChecksumTest, FewLargeRequests) {
  // Same layout: one request per slice of each file's needed range (the
  // chunks of a rank lie back to back), here one per 16 MiB slice: 1 per rank.
  constexpr uint64_t kSlice = uint64_t{16} << 20;
  CountingStorage counting(DefaultStorage());
  std::vector<LoadResult> res;
  ASSERT_TRUE(LoadAlong(0, 2, 2, false, &res, &counting, true, kSlice).ok());
  uint64_t requests = 0;
  for (const LoadResult& r : res) {
    EXPECT_EQ(r.requests, 1u);
    EXPECT_EQ(r.bytes_read, r.bytes_needed);
    requests += r.requests;
  }
  EXPECT_EQ(counting.reads.load(), requests + 1);  // + the manifest
  // Resharded along each dim, 3 ranks: at most one request per chunk (6
  // chunks), where reading the needed runs took one per row. Along dims 1
  // and 2 every block of both files is needed: one request per file. Along
  // dim 0, at most one block beyond the needed bytes at each end of a range.
  for (int dim = 0; dim < 3; ++dim) {
    counting.reads = 0;
    ASSERT_TRUE(LoadAlong(dim, 3, 3, false, &res, &counting, true, kSlice).ok());
    requests = 0;
    for (const LoadResult& r : res) {
      if (dim == 0) {
        EXPECT_LE(r.requests, 6u);
        EXPECT_LE(r.bytes_read,
                  r.bytes_needed + 2 * r.requests * internal_format::kDefaultBlockSize);
      } else {
        EXPECT_EQ(r.requests, 2u) << "dim " << dim;
      }
      requests += r.requests;
    }
    EXPECT_EQ(counting.reads.load(), requests + 1);
  }
  // The default slice is one block: a request per block read, a few more
  // where a chunk (6 in all) ends inside a block, along every dim.
  ASSERT_EQ(LoadOptions{}.read_slice_bytes, internal_format::kDefaultBlockSize);
  for (int dim = 0; dim < 3; ++dim) {
    ASSERT_TRUE(LoadAlong(dim, 3, 3, false, &res).ok());
    for (const LoadResult& r : res) {
      const uint64_t blocks = r.bytes_read / internal_format::kDefaultBlockSize;
      EXPECT_GE(r.requests, blocks) << "dim " << dim;
      EXPECT_LE(r.requests, blocks + 6) << "dim " << dim;
    }
  }
}

TEST_F(BlockChecksumTest, LoadAnnouncesItsReadsAhead) {
  // Windows of one slice (1 MiB) and of two (the files hold 3.5 MiB each, so
  // most windows are announced as the reads advance, not up front): every
  // read lies inside hints given before it, along every dim, reading alone
  // and cooperatively; bit for bit. With prefetch_bytes 0 there are no hints.
  PrefetchLogStorage log(DefaultStorage());
  for (uint64_t window : {uint64_t{1} << 20, uint64_t{2} << 20}) {
    for (bool coop : {false, true}) {
      for (int dim = 0; dim < 3; ++dim) {
        log.Clear();
        ASSERT_TRUE(LoadAlong(dim, 3, 3, coop, nullptr, &log, true, 0, window).ok());
        EXPECT_TRUE(log.EveryReadAnnouncedBefore(window, DataStarts()))
            << "window " << window << " dim " << dim << " coop " << coop;
      }
    }
  }
  // One rank loading a third along each dim reads parts of each file with
  // gaps between them (along dim 0, blocks of three chunks in one 4 MiB
  // window): the hints leave the gaps out.
  for (int dim = 0; dim < 3; ++dim) {
    log.Clear();
    ASSERT_TRUE(LoadAlong(dim, 3, 1, false, nullptr, &log, true, 0, uint64_t{4} << 20).ok());
    EXPECT_TRUE(log.EveryReadAnnouncedBefore(uint64_t{4} << 20, DataStarts())) << "dim " << dim;
    EXPECT_TRUE(log.EveryHintRead()) << "dim " << dim;
  }
  log.Clear();
  ASSERT_TRUE(LoadAlong(1, 3, 3, false, nullptr, &log, true, 0, 0).ok());
  EXPECT_EQ(log.hints(), 0);
  // A hint that throws is a lost hint: the load neither fails nor hangs.
  log.throw_on_prefetch = true;
  for (bool coop : {false, true}) {
    EXPECT_TRUE(LoadAlong(0, 3, 3, coop, nullptr, &log, true, 0, uint64_t{1} << 20).ok());
  }
  ASSERT_EQ(LoadOptions{}.prefetch_bytes, uint64_t{16} << 20);
}

TEST_F(BlockChecksumTest, VerifyAnnouncesItsReadsAhead) {
  // Slices of 768 KiB against windows of 1 MiB: a slice that crosses into
  // the next window finds it announced too.
  PrefetchLogStorage log(DefaultStorage());
  VerifyOptions o;
  o.storage = &log;
  o.read_slice_bytes = 768 << 10;
  o.prefetch_bytes = 1 << 20;
  Result<VerifyReport> r = VerifyCheckpoint(dir_, o);
  ASSERT_TRUE(r.ok() && r->ok()) << r.status().ToString();
  EXPECT_TRUE(log.EveryReadAnnouncedBefore(1 << 20, DataStarts()));
  log.Clear();
  o.prefetch_bytes = 0;
  r = VerifyCheckpoint(dir_, o);
  ASSERT_TRUE(r.ok() && r->ok());
  EXPECT_EQ(log.hints(), 0);
  EXPECT_EQ(VerifyOptions{}.prefetch_bytes, LoadOptions{}.prefetch_bytes);
  // A hint that throws is a lost hint, not a fault.
  log.throw_on_prefetch = true;
  o.prefetch_bytes = 1 << 20;
  r = VerifyCheckpoint(dir_, o);
  ASSERT_TRUE(r.ok() && r->ok()) << (r.ok() ? r->faults.size() : 0);
}

TEST_F(BlockChecksumTest, RoundsReusingBuffersOfEverySizeLoadBitForBit) {
  // Rounds of at most 96 KiB of sends (spans of up to 24 KiB): dozens of
  // rounds whose payload to each rank grows and shrinks, each set of send
  // buffers reused every other round. Over the thread comms (raw buffers,
  // placed from the sender's memory) and over a Comm that takes strings:
  // bit for bit, the same bytes received, every needed block read once.
  uint64_t stored = 0;
  for (const TensorRecord& t : manifest_.tensors) {
    for (const ChunkRecord& c : t.chunks) stored += c.nbytes;
  }
  for (int dim = 1; dim < 3; ++dim) {
    for (auto [parts, world] : {std::pair{3, 3}, {2, 4}}) {
      std::vector<uint64_t> received(2);
      for (int wrapped = 0; wrapped < 2; ++wrapped) {
        SCOPED_TRACE("dim " + std::to_string(dim) + " parts " + std::to_string(parts) + " world " +
                     std::to_string(world) + (wrapped ? " strings" : " views"));
        std::vector<TestRank> dst(world);
        for (int r = 0; r < world; ++r) Build(&dst[r], dim, r % parts, parts, false);
        std::vector<LoadResult> res(world);
        const std::vector<Status> st = RunThreadRanks(world, [&](Comm& comm) -> Status {
          LoadOptions o;
          o.cooperative = true;
          o.cooperative_round_bytes = 96 << 10;
          ForwardingComm fwd(comm);
          Comm& c = wrapped ? static_cast<Comm&>(fwd) : comm;
          SP_ASSIGN_OR_RETURN(res[comm.rank()], Load(dst[comm.rank()].state, dir_, c, o));
          return OkStatus();
        });
        uint64_t read = 0;
        for (int r = 0; r < world; ++r) {
          ASSERT_TRUE(st[r].ok()) << st[r].ToString();
          EXPECT_TRUE(Loaded(dst[r])) << "rank " << r;
          read += res[r].bytes_read;
          received[wrapped] += res[r].bytes_received;
        }
        EXPECT_EQ(read, stored);
      }
      EXPECT_GT(received[0], 0u);
      EXPECT_EQ(received[0], received[1]);
    }
  }
}

TEST_F(BlockChecksumTest, FlipInALaterPieceOfAStagedBlockFailsNamingTheBlock) {
  // A byte flipped past the first 128 KiB of a block, and its last byte,
  // fail every load that reads the block (same layout, other dim, cooperative; buffered and direct)
  // with DataLoss naming the key, chunk, file and the block's range.
  const TensorRecord& t = manifest_.tensors[0];  // "a": chunks of 1.25 MiB
  const ChunkRecord& c = t.chunks[0];
  ASSERT_GT(c.nbytes, manifest_.block_size);
  const std::string range = "bytes [" + std::to_string(c.offset) + ", " +
                            std::to_string(c.offset + manifest_.block_size) + ")";
  for (uint64_t rel : {(uint64_t{128} << 10) + 4097, manifest_.block_size - 1}) {
    SCOPED_TRACE("byte " + std::to_string(rel));
    FlipByte(manifest_.files[c.file], c.offset + rel);
    for (bool direct : {false, true}) {
      for (auto [dim, parts, world] : {std::tuple{0, 2, 2}, {1, 3, 3}, {1, 2, 4}}) {
        SCOPED_TRACE(std::string(direct ? "direct" : "buffered") + " dim " + std::to_string(dim) +
                     " world " + std::to_string(world));
        std::vector<TestRank> dst(world);
        for (int r = 0; r < world; ++r) Build(&dst[r], dim, r % parts, parts, false);
        LoadOptions o;
        o.direct_io = direct;
        o.cooperative = world > parts;
        const Status s = LoadRanks(StatesOf(dst), dir_, o);
        ASSERT_EQ(s.code(), StatusCode::kDataLoss) << s.ToString();
        EXPECT_NE(s.message().find("tensor 'a' chunk 0"), std::string::npos) << s.message();
        EXPECT_NE(s.message().find(manifest_.files[c.file]), std::string::npos) << s.message();
        EXPECT_NE(s.message().find(range), std::string::npos) << s.message() << " want " << range;
      }
    }
    FlipByte(manifest_.files[c.file], c.offset + rel);  // restore
  }
  ASSERT_TRUE(LoadAlong(1, 3, 3, false).ok());
}

}  // namespace
}  // namespace shardpoint
