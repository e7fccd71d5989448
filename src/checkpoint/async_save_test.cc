// Async save: the caller's tensors may change right after SaveAsync returns,
// errors surface at Wait() on every rank, one save in flight, a reused pool,
// logs that report a save only once committed.
#include "shardpoint/async_save.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <mutex>

#include "src/format/manifest.h"
#include "src/io/fault_storage.h"
#include "tests/testing/transformer.h"

using shardpoint::testing::ParallelConfig;

namespace shardpoint {
namespace {

using ::testing::HasSubstr;
using testing::ParallelConfig;

const testing::ModelConfig kModel{4, 64, 192, 500};

std::vector<testing::RankState> Build(const ParallelConfig& p, const testing::RefModel* ref) {
  std::vector<testing::RankState> out(p.world());
  for (int r = 0; r < p.world(); ++r) {
    auto rs = testing::BuildRankState(kModel, p, r);
    EXPECT_TRUE(rs.ok()) << rs.status().ToString();
    out[r] = std::move(*rs);
    if (ref) {
      EXPECT_TRUE(testing::FillFromReference(*ref, out[r].state.tensors).ok());
    }
  }
  return out;
}

void Scribble(testing::RankState& rs) {
  for (const LocalTensor& t : rs.state.tensors) {
    int64_t n = t.flat ? t.flat->size() : Box::Whole(t.shape).num_elements();
    std::memset(t.data, 0xAB, static_cast<size_t>(n) * DTypeSize(t.dtype));
  }
  for (Object& o : rs.state.objects) o.bytes = "scribbled";
  rs.state.common = "scribbled";
}

Status First(const std::vector<Status>& all) {
  for (const Status& s : all) {
    if (!s.ok()) return s;
  }
  return OkStatus();
}

// Loads `dir` into one rank (TP=1) and compares with `ref`.
Status LoadAndCheck(Storage* storage, const std::string& dir, const testing::RefModel& ref) {
  std::vector<testing::RankState> dst = Build(ParallelConfig{1, 1, 1, false}, nullptr);
  dst[0].state.objects.clear();
  dst[0].state.common = "";
  LoadOptions o;
  o.storage = storage;
  o.allow_unexpected_keys = true;
  auto comm = MakeSingleComm();
  SP_RETURN_IF_ERROR(Load(dst[0].state, dir, *comm, o).status());
  if (*dst[0].state.common != "{\"iteration\": 1000}") return InternalError("common changed");
  return testing::CheckAgainstReference(ref, dst[0].state.tensors);
}

TEST(AsyncSave, TensorsModifiedRightAfterTheCallAreSavedAsTheyWere) {
  const testing::RefModel ref = testing::MakeReference(kModel, 7);
  const ParallelConfig p{2, 1, 2, true};
  std::vector<testing::RankState> src = Build(p, &ref);
  auto mem = NewMemStorage();
  SaveOptions o;
  o.storage = mem.get();
  ASSERT_TRUE(First(RunThreadRanks(p.world(), [&](Comm& comm) -> Status {
                AsyncSaver saver;
                SaveHandle h = SaveAsync(saver, src[comm.rank()].state, "ckpt", comm, o);
                Scribble(src[comm.rank()]);  // the training step goes on
                EXPECT_GT(h.staged_bytes(), 0u);
                SP_RETURN_IF_ERROR(h.Wait().status());
                EXPECT_TRUE(h.Done());
                return OkStatus();
              })).ok());
  Status s = LoadAndCheck(mem.get(), "ckpt", ref);
  EXPECT_TRUE(s.ok()) << s.ToString();
}

TEST(AsyncSave, StridedTensorIsStagedByValue) {
  // A 3x4 global tensor held transposed in memory (column-major strides).
  std::vector<float> mem(12);
  for (int i = 0; i < 12; ++i) mem[i] = static_cast<float>(i);  // mem[c*3 + r] = (r, c)
  LocalTensor t;
  t.dtype = DType::kF32;
  t.data = mem.data();
  t.shape = {3, 4};
  t.strides = {1, 3};
  t.segments = {Segment{"t", {3, 4}, Box::Whole({3, 4}), {0, 0}}};
  State st;
  st.tensors.push_back(t);
  auto storage = NewMemStorage();
  SaveOptions o;
  o.storage = storage.get();
  auto comm = MakeSingleComm();
  AsyncSaver saver;
  SaveHandle h = SaveAsync(saver, st, "ckpt", *comm, o);
  std::fill(mem.begin(), mem.end(), -1.0f);
  ASSERT_TRUE(h.Wait().ok()) << h.Wait().status().ToString();

  std::vector<float> out(12, 0);
  State dst;
  LocalTensor d = t;
  d.data = out.data();
  d.strides.clear();
  dst.tensors.push_back(d);
  LoadOptions lo;
  lo.storage = storage.get();
  ASSERT_TRUE(Load(dst, "ckpt", *comm, lo).ok());
  for (int r = 0; r < 3; ++r) {
    for (int c = 0; c < 4; ++c) EXPECT_EQ(out[r * 4 + c], static_cast<float>(c * 3 + r));
  }
}

TEST(AsyncSave, WriteErrorSurfacesAtWaitOnEveryRankAndNothingIsCommitted) {
  const testing::RefModel ref = testing::MakeReference(kModel, 8);
  const ParallelConfig p{2, 1, 1, false};
  std::vector<testing::RankState> src = Build(p, &ref);
  auto mem = NewMemStorage();
  internal_io::FaultStorage faults(mem.get());
  faults.FailWritesFrom(2);
  SaveOptions o;
  o.storage = &faults;
  std::vector<Status> got = RunThreadRanks(p.world(), [&](Comm& comm) -> Status {
    AsyncSaver saver;
    SaveHandle h = SaveAsync(saver, src[comm.rank()].state, "ckpt", comm, o);
    Status s = h.Wait().status();
    EXPECT_EQ(s.ToString(), h.Wait().status().ToString());  // the same result every time
    return s;
  });
  for (const Status& s : got) {
    EXPECT_EQ(s.code(), StatusCode::kIOError) << s.ToString();
    EXPECT_THAT(s.ToString(), HasSubstr("injected"));
  }
  EXPECT_FALSE(*mem->Exists(std::string("ckpt/") + internal_format::kManifestName));
}

TEST(AsyncSave, StagingBoundOnOneRankFailsEveryRankAtWait) {
  const ParallelConfig p{2, 1, 1, false};
  std::vector<testing::RankState> src = Build(p, nullptr);
  auto mem = NewMemStorage();
  SaveOptions o;
  o.storage = mem.get();
  std::vector<Status> got = RunThreadRanks(p.world(), [&](Comm& comm) -> Status {
    AsyncSaver saver(AsyncSaverOptions{comm.rank() == 1 ? uint64_t{1024} : 0});
    return SaveAsync(saver, src[comm.rank()].state, "ckpt", comm, o).Wait().status();
  });
  for (const Status& s : got) {
    EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
    EXPECT_THAT(s.ToString(), HasSubstr("rank 1"));
    EXPECT_THAT(s.ToString(), HasSubstr("max_staging_bytes"));
  }
  EXPECT_FALSE(*mem->Exists(std::string("ckpt/") + internal_format::kManifestName));
}

TEST(AsyncSave, SecondSaveWaitsForTheFirstAndReusesThePool) {
  const testing::RefModel ref = testing::MakeReference(kModel, 9);
  const ParallelConfig p{1, 1, 2, true};
  std::vector<testing::RankState> src = Build(p, &ref);
  auto mem = NewMemStorage();
  SaveOptions o;
  o.storage = mem.get();
  ASSERT_TRUE(First(RunThreadRanks(p.world(), [&](Comm& comm) -> Status {
                AsyncSaver saver;
                SaveHandle a = SaveAsync(saver, src[comm.rank()].state, "a", comm, o);
                const uint64_t pool = saver.pool_bytes();
                SaveHandle b = SaveAsync(saver, src[comm.rank()].state, "b", comm, o);
                EXPECT_TRUE(a.Done());  // b waited for a
                EXPECT_EQ(saver.pool_bytes(), pool);
                SP_RETURN_IF_ERROR(a.Wait().status());
                return b.Wait().status();
              })).ok());
  for (const char* dir : {"a", "b"}) {
    Status s = LoadAndCheck(mem.get(), dir, ref);
    EXPECT_TRUE(s.ok()) << dir << ": " << s.ToString();
  }
}

TEST(AsyncSave, ReservedPoolIsUsedByTheFirstSaveAndEveryLaterOne) {
  const testing::RefModel ref = testing::MakeReference(kModel, 11);
  const ParallelConfig p{2, 1, 1, false};
  std::vector<testing::RankState> src = Build(p, &ref);
  auto mem = NewMemStorage();
  SaveOptions o;
  o.storage = mem.get();
  ASSERT_TRUE(First(RunThreadRanks(p.world(), [&](Comm& comm) -> Status {
                const State& state = src[comm.rank()].state;
                SP_ASSIGN_OR_RETURN(const uint64_t need, AsyncSaver::StagingBytes(state));
                AsyncSaver saver;
                EXPECT_EQ(saver.pool_bytes(), 0u);
                SP_RETURN_IF_ERROR(saver.Reserve(state));  // before any save
                const uint64_t pool = saver.pool_bytes();
                EXPECT_GE(pool, need);
                EXPECT_LT(pool, need + (uint64_t{2} << 20));  // 2 MiB rounding
                for (const char* dir : {"a", "b"}) {
                  SaveHandle h = SaveAsync(saver, state, dir, comm, o);
                  EXPECT_FALSE(h.pool_grew()) << dir;
                  EXPECT_EQ(h.staged_bytes(), need);
                  EXPECT_EQ(saver.pool_bytes(), pool);
                  SP_RETURN_IF_ERROR(h.Wait().status());
                }
                // A smaller reserve keeps the pool as it is.
                SP_RETURN_IF_ERROR(saver.Reserve(1));
                EXPECT_EQ(saver.pool_bytes(), pool);

                // Without a reserve, the first save creates the pool, later ones reuse it.
                AsyncSaver cold;
                SaveHandle first = SaveAsync(cold, state, "c", comm, o);
                EXPECT_TRUE(first.pool_grew());
                SaveHandle second = SaveAsync(cold, state, "d", comm, o);
                EXPECT_FALSE(second.pool_grew());
                SP_RETURN_IF_ERROR(first.Wait().status());
                return second.Wait().status();
              })).ok());
  for (const char* dir : {"a", "b", "c", "d"}) {
    Status s = LoadAndCheck(mem.get(), dir, ref);
    EXPECT_TRUE(s.ok()) << dir << ": " << s.ToString();
  }
}

TEST(AsyncSave, BoundHoldsForReserveAndSavesAndALargerStateGrowsAnUnboundedPool) {
  const testing::RefModel ref = testing::MakeReference(kModel, 13);
  const ParallelConfig p{1, 1, 1, false};
  std::vector<testing::RankState> small = Build(ParallelConfig{2, 1, 1, false}, &ref);
  std::vector<testing::RankState> large = Build(p, &ref);  // TP=1: twice the bytes
  auto mem = NewMemStorage();
  SaveOptions o;
  o.storage = mem.get();
  auto comm = MakeSingleComm();
  const uint64_t small_need = *AsyncSaver::StagingBytes(small[0].state);
  const uint64_t large_need = *AsyncSaver::StagingBytes(large[0].state);
  const uint64_t bound = uint64_t{2} << 20;  // one pool rounding unit
  ASSERT_LE(small_need, bound);
  ASSERT_GT(large_need, bound);

  AsyncSaver bounded(AsyncSaverOptions{bound});
  Status s = bounded.Reserve(large[0].state);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
  EXPECT_THAT(s.ToString(), HasSubstr("max_staging_bytes"));
  EXPECT_THAT(s.ToString(), HasSubstr(std::to_string(large_need)));
  EXPECT_EQ(bounded.pool_bytes(), 0u);
  ASSERT_TRUE(bounded.Reserve(small[0].state).ok());
  const uint64_t pool = bounded.pool_bytes();
  // A state over the bound fails typed, is not staged in part, leaves the pool.
  SaveHandle h = SaveAsync(bounded, large[0].state, "over", *comm, o);
  s = h.Wait().status();
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
  EXPECT_THAT(s.ToString(), HasSubstr("max_staging_bytes"));
  EXPECT_EQ(bounded.pool_bytes(), pool);
  EXPECT_FALSE(*mem->Exists(std::string("over/") + internal_format::kManifestName));

  // Unbounded: a state larger than the reserved pool grows it, and saves right.
  AsyncSaver grows;
  ASSERT_TRUE(grows.Reserve(small_need).ok());
  h = SaveAsync(grows, large[0].state, "grown", *comm, o);
  EXPECT_TRUE(h.pool_grew());
  EXPECT_GE(grows.pool_bytes(), large_need);
  ASSERT_TRUE(h.Wait().ok());
  Status loaded = LoadAndCheck(mem.get(), "grown", ref);
  EXPECT_TRUE(loaded.ok()) << loaded.ToString();
}

TEST(AsyncSave, LogReportsSavedOnlyAfterTheCommit) {
  const ParallelConfig p{2, 1, 1, false};
  std::vector<testing::RankState> src = Build(p, nullptr);
  auto mem = NewMemStorage();
  std::mutex mu;
  std::vector<std::string> lines;
  bool committed_when_reported = false;
  SaveOptions o;
  o.storage = mem.get();
  o.log = [&](const std::string& line) {
    std::lock_guard<std::mutex> lock(mu);
    lines.push_back(line);
    if (line.find("saved checkpoint") != std::string::npos) {
      committed_when_reported = *mem->Exists(std::string("ckpt/") + internal_format::kManifestName);
    }
  };
  ASSERT_TRUE(First(RunThreadRanks(p.world(), [&](Comm& comm) -> Status {
                AsyncSaver saver;
                return SaveAsync(saver, src[comm.rank()].state, "ckpt", comm, o).Wait().status();
              })).ok());
  ASSERT_EQ(lines.size(), 2u);  // rank 0 only: staged, then saved
  EXPECT_THAT(lines[0], HasSubstr("staged"));
  EXPECT_THAT(lines[1], HasSubstr("saved checkpoint 'ckpt' (committed)"));
  EXPECT_THAT(lines[1], HasSubstr("GB in 2 files"));
  EXPECT_TRUE(committed_when_reported);

  // A failed save says so.
  lines.clear();
  std::vector<Status> got = RunThreadRanks(p.world(), [&](Comm& comm) {
    return Save(src[comm.rank()].state, "ckpt", comm, o).status();  // exists: no overwrite
  });
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_THAT(lines[0], HasSubstr("FAILED"));
  EXPECT_THAT(lines[0], HasSubstr("not committed"));
}

}  // namespace
}  // namespace shardpoint
