// Resources passed to the HF entry points: one ThreadPool shared by export,
// conversions, diff and HF loads running at once on several threads is where
// their parallel I/O runs (no threads made per call); their log lines; the
// deprecated `threads` spelling of io_threads; ReadHfMapping's Resources.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "shardpoint/hf.h"
#include "shardpoint/layout.h"
#include "shardpoint/resources.h"
#include "shardpoint/thread_pool.h"
#include "tests/testing/recording_storage.h"
#include "tests/testing/seeded_floats.h"

namespace shardpoint {
namespace {

using testing::ProcessThreads;
using testing::RecordingStorage;
using testing::RunJobs;

constexpr int64_t kRows = 32, kCols = 2048;  // 256 KiB per tensor

HfTensor Tensor(const std::string& name, int seed) {
  HfTensor t;
  t.name = name;
  t.dtype = DType::kF32;
  t.shape = {kRows, kCols};
  const std::vector<float> v = testing::SeededFloats(seed, kRows * kCols);
  t.bytes.assign(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
  return t;
}

// Writes an HF model, exports it again, converts it to shardpoint and to
// DCP, diffs them all against the model and loads it (sharded over 2 thread
// ranks), with `res`'s resources and small blocks.
Status HfRoundTrips(const Resources& res, const std::string& dir, int seed) {
  std::vector<HfTensor> tensors = {Tensor("a", seed), Tensor("b", seed + 1)};
  HfWriteOptions wo;
  static_cast<Resources&>(wo) = res;
  SP_RETURN_IF_ERROR(WriteHfModel(dir + "/hf", tensors, wo));
  const HfMapping id = IdentityHfMapping();
  ExportHfOptions eo;
  static_cast<Resources&>(eo) = res;
  eo.block_bytes = 16 << 10;
  SP_RETURN_IF_ERROR(ExportHf(dir + "/hf", dir + "/hf2", id, eo).status());
  SP_RETURN_IF_ERROR(ConvertHfToShardpoint(dir + "/hf", dir + "/sp", id, eo).status());
  SP_RETURN_IF_ERROR(ConvertToDcp(dir + "/sp", dir + "/dcp", id, eo).status());
  DiffOptions d;
  static_cast<Resources&>(d) = res;
  d.block_bytes = 16 << 10;
  for (const char* other : {"/hf2", "/sp", "/dcp"}) {
    SP_ASSIGN_OR_RETURN(DiffReport r, DiffCheckpoints(dir + "/hf", dir + other, id, d));
    if (!r.equal() || r.entries.size() != 2) return InternalError(dir + other + " differs");
  }
  HfOptions ho;
  static_cast<Resources&>(ho) = res;
  SP_ASSIGN_OR_RETURN(std::vector<HfKeyInfo> keys, DescribeHf(dir + "/hf", id, ho));
  if (keys.size() != 2) return InternalError("DescribeHf: " + std::to_string(keys.size()));

  std::vector<Status> st = RunThreadRanks(2, [&](Comm& comm) -> Status {
    std::vector<float> half(kRows * kCols / 2);
    SP_ASSIGN_OR_RETURN(LocalTensor t, SplitTensor("b", DType::kF32, half.data(), {kRows, kCols}, 0,
                                                   comm.rank(), comm.size()));
    State state;
    state.tensors = {t};
    HfLoadOptions lo;
    static_cast<Resources&>(lo.load) = res;
    lo.load.allow_unexpected_keys = true;
    lo.load.read_slice_bytes = 16 << 10;
    SP_RETURN_IF_ERROR(LoadFromHf(state, dir + "/hf", id, comm, lo).status());
    const size_t bytes = half.size() * sizeof(float);
    if (std::memcmp(half.data(), tensors[1].bytes.data() + comm.rank() * bytes, bytes) != 0) {
      return InternalError("rank " + std::to_string(comm.rank()) + " loaded wrong bytes");
    }
    return OkStatus();
  });
  for (const Status& s : st) SP_RETURN_IF_ERROR(s);
  return OkStatus();
}

TEST(HfSharedResourcesTest, OnePoolServesExportConvertDiffAndLoadFromSeveralThreads) {
  std::unique_ptr<Storage> mem = NewMemStorage();
  ThreadPool pool(3);
  RecordingStorage storage(mem.get(), &pool);
  Resources res;
  res.storage = &storage;
  res.pool = &pool;
  res.io_threads = 64;  // not used with a pool

  constexpr int kJobs = 3;
  const int before = ProcessThreads();
  std::vector<Status> status =
      RunJobs(kJobs, [&](int j) { return HfRoundTrips(res, "job" + std::to_string(j), j); });
  for (const Status& s : status) ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_GT(storage.calls(), 100);
  EXPECT_GT(storage.in_pool(), 0) << "the shared pool was not used";
  // Each job ran 2 thread ranks for its HF load: at most the jobs, their
  // ranks and nothing else came on top of the threads there were before.
  EXPECT_LE(storage.max_threads(), before + kJobs * 3) << "a call made threads of its own";
}

TEST(HfSharedResourcesTest, LogLinesAndTheDeprecatedThreadsSpelling) {
  std::unique_ptr<Storage> mem = NewMemStorage();
  RecordingStorage storage(mem.get(), nullptr);
  std::vector<std::string> lines;
  ASSERT_TRUE(WriteHfModel("hf", {Tensor("a", 1)},
                           [&] {
                             HfWriteOptions o;
                             o.storage = &storage;
                             return o;
                           }())
                  .ok());
  ExportHfOptions eo;
  eo.storage = &storage;
  eo.threads = 3;  // the old spelling still sets io_threads
  eo.block_bytes = 4096;
  eo.log = [&](const std::string& line) { lines.push_back(line); };
  const int before = ProcessThreads();
  // 1 ms per storage call: the calling thread, which works on the blocks too,
  // cannot finish them all before the pool's threads start (under load it
  // once did, and no call ran on the pool).
  storage.set_call_delay_us(1000);
  Result<ExportHfStats> r = ExportHf("hf", "out", IdentityHfMapping(), eo);
  storage.set_call_delay_us(0);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  // io_threads 3 = the calling thread and a pool of 2.
  std::set<std::thread::id> ids = storage.ids();
  ids.erase(std::this_thread::get_id());
  EXPECT_GE(ids.size(), 1u);
  EXPECT_LE(ids.size(), 2u);
  EXPECT_LE(storage.max_threads(), before + 2);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].rfind("shardpoint: export-hf 'hf' -> 'out': 1 files, 1 tensors", 0), 0u)
      << lines[0];

  DiffOptions d;
  d.storage = &storage;
  d.threads = 1;  // deprecated spelling
  d.log = eo.log;
  Result<DiffReport> diff = DiffCheckpoints("hf", "out", IdentityHfMapping(), d);
  ASSERT_TRUE(diff.ok()) << diff.status().ToString();
  EXPECT_TRUE(diff->equal());
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[1], "shardpoint: diff 'hf' 'out': 1 keys, equal");
}

TEST(HfSharedResourcesTest, ReadHfMappingTakesResources) {
  std::unique_ptr<Storage> mem = NewMemStorage();
  ASSERT_TRUE(mem->WriteStringToFile("m.json", R"({"rules": []})").ok());
  Resources res;
  res.storage = mem.get();
  Result<HfMapping> m = ReadHfMapping("m.json", res);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_TRUE(m->rules.empty());
  Result<HfMapping> old = ReadHfMapping("m.json", mem.get());  // the Storage* overload
  EXPECT_TRUE(old.ok()) << old.status().ToString();
  EXPECT_EQ(ReadHfMapping("m.json").status().code(), StatusCode::kNotFound);  // DefaultStorage
}

}  // namespace
}  // namespace shardpoint
