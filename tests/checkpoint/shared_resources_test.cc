// Resources (shardpoint/resources.h) passed in: one ThreadPool shared by
// saves, loads, verifies, async saves and the manager's calls, from several
// threads at once, is the only place their parallel I/O runs (no thread is
// made per call); the documented defaults; the log sink; the deprecated
// spellings of renamed knobs.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "shardpoint/async_save.h"
#include "shardpoint/checkpoint.h"
#include "shardpoint/layout.h"
#include "shardpoint/manager.h"
#include "shardpoint/resources.h"
#include "shardpoint/thread_pool.h"
#include "shardpoint/verify.h"
#include "tests/testing/recording_storage.h"
#include "tests/testing/seeded_floats.h"

namespace shardpoint {
namespace {

using testing::ProcessThreads;
using testing::RecordingStorage;
using testing::RunJobs;
using testing::SeededFloats;

constexpr int64_t kRows = 64, kCols = 4096;  // 1 MiB per tensor

// Saves two tensors into `dir`, loads them back, verifies the checkpoint:
// every call with `res`'s resources and small slices/buffers, so that each
// does many I/O calls.
// `between` runs after the save and after the load.
Status SaveLoadVerify(
    const Resources& res, const std::string& dir, int seed,
    const std::function<void()>& between = [] {}) {
  std::vector<float> a = SeededFloats(seed, kRows * kCols),
                     b = SeededFloats(seed + 100, kRows * kCols);
  State state;
  state.tensors = {WholeTensor("a", DType::kF32, a.data(), {kRows, kCols}),
                   WholeTensor("b", DType::kF32, b.data(), {kRows, kCols})};
  std::unique_ptr<Comm> comm = MakeSingleComm();
  SaveOptions so;
  static_cast<Resources&>(so) = res;
  so.staging_bytes = 64 << 10;
  SP_RETURN_IF_ERROR(Save(state, dir, *comm, so).status());
  between();

  std::vector<float> a2(a.size()), b2(b.size());
  State back;
  back.tensors = {WholeTensor("a", DType::kF32, a2.data(), {kRows, kCols}),
                  WholeTensor("b", DType::kF32, b2.data(), {kRows, kCols})};
  LoadOptions lo;
  static_cast<Resources&>(lo) = res;
  lo.read_slice_bytes = 64 << 10;
  SP_RETURN_IF_ERROR(Load(back, dir, *comm, lo).status());
  if (a2 != a || b2 != b) return InternalError(dir + ": loaded bytes differ from the saved ones");
  between();

  VerifyOptions vo;
  static_cast<Resources&>(vo) = res;
  vo.read_slice_bytes = 64 << 10;
  SP_ASSIGN_OR_RETURN(VerifyReport r, VerifyCheckpoint(dir, vo));
  if (!r.ok()) return InternalError(dir + ": verify found " + r.faults[0].message);
  if (r.bytes_checked < 2 * kRows * kCols * sizeof(float)) {
    return InternalError(dir + ": verify checked too few bytes");
  }
  return OkStatus();
}

TEST(SharedResourcesTest, OnePoolServesSavesLoadsAndVerifiesFromSeveralThreads) {
  std::unique_ptr<Storage> mem = NewMemStorage();
  ThreadPool pool(3);
  RecordingStorage storage(mem.get(), &pool);
  Resources res;
  res.storage = &storage;
  res.pool = &pool;
  res.io_threads = 64;  // not used with a pool: 64 threads per call would show

  constexpr int kJobs = 4;
  std::set<std::thread::id> callers;
  const int before = ProcessThreads();
  std::vector<Status> status = RunJobs(
      kJobs,
      [&](int j) {
        Status s;
        for (int round = 0; round < 2 && s.ok(); ++round) {
          s = SaveLoadVerify(res, "job" + std::to_string(j) + "_" + std::to_string(round),
                             j * 10 + round);
        }
        return s;
      },
      &callers);
  for (const Status& s : status) ASSERT_TRUE(s.ok()) << s.ToString();

  // Every read and write ran on a pool thread or on the thread that made the
  // call, and the process never had more threads than before plus the jobs.
  ASSERT_GT(storage.calls(), 100);
  EXPECT_GT(storage.in_pool(), 0) << "the shared pool was not used";
  std::set<std::thread::id> others = storage.ids();
  for (std::thread::id id : callers) others.erase(id);
  EXPECT_LE(static_cast<int>(others.size()), pool.num_threads())
      << "I/O ran on threads that are neither the pool's nor the callers'";
  EXPECT_LE(storage.max_threads(), before + kJobs) << "a call made threads of its own";
}

TEST(SharedResourcesTest, ThreadRanksShareOnePoolForSaveAndLoad) {
  std::unique_ptr<Storage> mem = NewMemStorage();
  ThreadPool pool(2);
  RecordingStorage storage(mem.get(), &pool);
  const int before = ProcessThreads();
  std::vector<Status> st = RunThreadRanks(3, [&](Comm& comm) -> Status {
    const int r = comm.rank();
    std::vector<float> full = SeededFloats(7, kRows * kCols);
    // Rank r saves its row block of "w"; every rank loads the whole tensor.
    SP_ASSIGN_OR_RETURN(LocalTensor shard, SplitTensor("w", DType::kF32, nullptr, {kRows, kCols},
                                                       /*dim=*/0, r, comm.size()));
    const Box& box = shard.segments[0].global_box;
    std::vector<float> mine(box.num_elements());
    std::memcpy(mine.data(), full.data() + box.offset[0] * kCols, mine.size() * sizeof(float));
    shard.data = mine.data();
    State state;
    state.tensors = {shard};
    SaveOptions so;
    so.storage = &storage;
    so.pool = &pool;
    so.staging_bytes = 64 << 10;
    SP_RETURN_IF_ERROR(Save(state, "ranks", comm, so).status());
    std::vector<float> back(full.size());
    State whole;
    whole.tensors = {WholeTensor("w", DType::kF32, back.data(), {kRows, kCols})};
    LoadOptions lo;
    lo.storage = &storage;
    lo.pool = &pool;
    lo.read_slice_bytes = 64 << 10;
    SP_RETURN_IF_ERROR(Load(whole, "ranks", comm, lo).status());
    if (back != full) return InternalError("rank " + std::to_string(r) + ": wrong bytes");
    return OkStatus();
  });
  for (const Status& s : st) ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_GT(storage.in_pool(), 0);
  EXPECT_LE(storage.max_threads(), before + 3);
}

TEST(SharedResourcesTest, WithoutAPoolACallMakesIoThreadsThreads) {
  std::unique_ptr<Storage> mem = NewMemStorage();
  RecordingStorage storage(mem.get(), nullptr);
  Resources res;
  res.storage = &storage;
  res.io_threads = 2;
  const int before = ProcessThreads();
  // A joined thread can still be counted in /proc for a moment after join()
  // returns (the kernel wakes the joiner before it reaps the thread): wait for
  // the count to come back between calls, so that one call's exiting threads
  // are not counted as the next one's.
  auto back_to_before = [before] {
    for (int i = 0; i < 2000 && ProcessThreads() != before; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  };
  ASSERT_TRUE(SaveLoadVerify(res, "own", 1, back_to_before).ok());
  // Writes run on the save's own pool: not on the calling thread.
  std::set<std::thread::id> others = storage.ids();
  others.erase(std::this_thread::get_id());
  EXPECT_GE(others.size(), 1u);
  // Save, load and verify each made (and joined) a pool of 2: at most 2
  // threads more at any time, and none left behind.
  EXPECT_LE(storage.max_threads(), before + 2);
  back_to_before();
  EXPECT_EQ(ProcessThreads(), before);
}

TEST(SharedResourcesTest, DefaultsAreTheDocumentedOnes) {
  const Resources r;
  EXPECT_EQ(r.storage, nullptr);
  EXPECT_EQ(r.pool, nullptr);
  EXPECT_EQ(r.io_threads, 4);
  EXPECT_FALSE(static_cast<bool>(r.log));
  // Every options struct starts from them.
  const SaveOptions save;
  const LoadOptions load;
  const ManagerOptions manager;
  const DescribeOptions describe;
  for (const Resources* o :
       {static_cast<const Resources*>(&save), static_cast<const Resources*>(&load),
        static_cast<const Resources*>(&manager), static_cast<const Resources*>(&describe)}) {
    EXPECT_EQ(o->storage, nullptr);
    EXPECT_EQ(o->pool, nullptr);
    EXPECT_EQ(o->io_threads, 4);
  }
  VerifyOptions v;
  EXPECT_EQ(v.io_threads, 4);
  EXPECT_EQ(v.read_slice_bytes, uint64_t{1} << 20);
  EXPECT_EQ(LoadOptions{}.read_slice_bytes, v.read_slice_bytes);  // one knob, one default

  // resources.h states each default in its table.
  std::ifstream f(std::string(SP_SOURCE_DIR) + "/include/shardpoint/resources.h");
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  for (const char* line : {"storage     nullptr = DefaultStorage()", "pool        nullptr = a pool",
                           "io_threads  4", "log         empty = silent"}) {
    EXPECT_NE(text.find(line), std::string::npos) << line;
  }
}

TEST(SharedResourcesTest, DefaultStorageIsPosix) {
  char tmpl[] = "/tmp/sp_resources_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = std::string(tmpl) + "/ckpt";
  std::vector<float> a = SeededFloats(3, 1000);
  State state;
  state.tensors = {WholeTensor("a", DType::kF32, a.data(), {1000})};
  std::unique_ptr<Comm> comm = MakeSingleComm();
  ASSERT_TRUE(Save(state, dir, *comm).ok());  // no storage given
  // Closed before the removal below: NFS and FUSE keep an open file's name.
  EXPECT_TRUE(std::ifstream(dir + "/manifest").good())
      << "the save did not go to the POSIX filesystem";
  Result<VerifyReport> r = VerifyCheckpoint(dir);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->ok());
  EXPECT_EQ(r->chunks_checked, 1);
  ASSERT_TRUE(DefaultStorage()->RemoveAll(tmpl).ok());
}

TEST(SharedResourcesTest, LogLinesGoToTheLogSink) {
  std::unique_ptr<Storage> mem = NewMemStorage();
  std::vector<std::string> lines;
  Resources res;
  res.storage = mem.get();
  res.log = [&](const std::string& line) { lines.push_back(line); };
  ASSERT_TRUE(SaveLoadVerify(res, "logged", 2).ok());
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0].rfind("shardpoint: saved checkpoint 'logged' (committed)", 0), 0u) << lines[0];
  EXPECT_EQ(lines[1].rfind("shardpoint: loaded checkpoint 'logged': ", 0), 0u) << lines[1];
  EXPECT_EQ(lines[2].rfind("shardpoint: verified 'logged': 2 chunks", 0), 0u) << lines[2];
  EXPECT_NE(lines[2].find(", OK"), std::string::npos) << lines[2];

  // A failed load is logged as such, with its error.
  lines.clear();
  std::unique_ptr<Comm> comm = MakeSingleComm();
  State none;
  LoadOptions lo;
  static_cast<Resources&>(lo) = res;
  ASSERT_FALSE(Load(none, "absent", *comm, lo).ok());
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].rfind("shardpoint: load of checkpoint 'absent' FAILED: NotFound: ", 0), 0u)
      << lines[0];
}

TEST(SharedResourcesTest, AsyncSaverAndManagerUseThePassedPool) {
  std::unique_ptr<Storage> mem = NewMemStorage();
  ThreadPool pool(2);
  RecordingStorage storage(mem.get(), &pool);
  std::vector<std::string> lines;
  std::unique_ptr<Comm> comm = MakeSingleComm();
  ManagerOptions mo;
  mo.storage = &storage;
  mo.pool = &pool;
  mo.log = [&](const std::string& line) { lines.push_back(line); };
  Result<std::unique_ptr<CheckpointManager>> m = CheckpointManager::Open("root", *comm, mo);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  std::vector<float> a = SeededFloats(5, kRows * kCols);
  State state;
  state.tensors = {WholeTensor("a", DType::kF32, a.data(), {kRows, kCols})};
  AsyncSaver saver;
  const int before = ProcessThreads();
  SaveOptions so;  // storage, pool and log come from the manager
  so.staging_bytes = 64 << 10;
  SaveHandle h = (*m)->SaveAsync(saver, state, 100, *comm, so);
  ASSERT_TRUE(h.Wait().ok()) << h.Wait().status().ToString();
  EXPECT_GT(storage.in_pool(), 0);  // writes always run on the pool
  std::vector<float> back(a.size());
  State load;
  load.tensors = {WholeTensor("a", DType::kF32, back.data(), {kRows, kCols})};
  LoadOptions lo;  // likewise
  lo.read_slice_bytes = 64 << 10;
  Result<int64_t> it = (*m)->Resume(load, *comm, lo);
  ASSERT_TRUE(it.ok()) << it.status().ToString();
  EXPECT_EQ(*it, 100);
  EXPECT_EQ(back, a);
  // The AsyncSaver's thread is the only one on top of the pool's.
  EXPECT_LE(storage.max_threads(), before + 1);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_NE(lines[0].find("async save of 'root/iter_0000100' staged"), std::string::npos)
      << lines[0];
  EXPECT_NE(lines[1].find("saved checkpoint 'root/iter_0000100'"), std::string::npos) << lines[1];
  EXPECT_NE(lines[2].find("loaded checkpoint 'root/iter_0000100'"), std::string::npos) << lines[2];
}

TEST(SharedResourcesTest, DeprecatedVerifySpellingsStillWork) {
  std::unique_ptr<Storage> mem = NewMemStorage();
  Resources res;
  res.storage = mem.get();
  ASSERT_TRUE(SaveLoadVerify(res, "old", 4).ok());
  // Progress is called once per slice: the slice size shows which knob won.
  auto slices = [&](VerifyOptions o) {
    std::atomic<int64_t> n{0};
    o.storage = mem.get();
    o.progress = [&](uint64_t, uint64_t) { ++n; };
    Result<VerifyReport> r = VerifyCheckpoint("old", o);
    EXPECT_TRUE(r.ok() && r->ok());
    return n.load();
  };
  VerifyOptions by_new;
  by_new.io_threads = 2;
  by_new.read_slice_bytes = 4096;
  VerifyOptions by_old;
  by_old.threads = 2;
  by_old.slice_bytes = 4096;
  const int64_t expected = 2 * kRows * kCols * 4 / 4096;
  EXPECT_EQ(slices(by_new), expected);
  EXPECT_EQ(slices(by_old), expected);
  EXPECT_EQ(slices(VerifyOptions{}), 2);  // 16 MiB slices: one per 1 MiB chunk
}

}  // namespace
}  // namespace shardpoint
