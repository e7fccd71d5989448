// A failure on one rank only is every rank's error, for every collective:
// save, load, cooperative load, HF load and the manager. The failures are the
// kind that used to escape the agreements: an exception (std::bad_alloc) on
// one rank, and a size read from disk that one rank would allocate.
//
// Ranks are threads (RunThreadRanks); each rank gets its own storage, so one
// rank's storage can fail while the others' work.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <new>

#include "shardpoint/checkpoint.h"
#include "shardpoint/hf.h"
#include "shardpoint/manager.h"
#include "src/checkpoint/commit.h"
#include "src/io/fault_storage.h"
#include "src/io/mem_storage.h"
#include "src/source/manifest_read.h"
#include "tests/testing/throwing_storage.h"

namespace shardpoint {
namespace {

using ::testing::HasSubstr;

using testing::ThrowingStorage;

constexpr int kRanks = 3;

// Rank r holds rows [2r, 2r + 2) of "w" [6, 4] F32, and object "o" (rank 1).
struct RankState {
  std::vector<float> mem = std::vector<float>(8);
  State state;
  RankState(int r, bool with_object, Shape global = {6, 4}) {
    for (size_t i = 0; i < mem.size(); ++i) mem[i] = static_cast<float>(r * 100 + i);
    LocalTensor t;
    t.data = mem.data();
    t.shape = {2, 4};
    t.segments = {Segment{"w", global, Box({2 * r, 0}, {2, 4}), {0, 0}}};
    state.tensors.push_back(t);
    if (with_object) state.objects.push_back(Object{"o", "object bytes", {}, {}});
  }
};

// Every rank failed with the same error, which holds `what`.
void ExpectEveryRankFails(const std::vector<Status>& all, StatusCode code,
                          const std::string& what) {
  ASSERT_EQ(all.size(), static_cast<size_t>(kRanks));
  for (size_t r = 0; r < all.size(); ++r) {
    EXPECT_EQ(all[r].code(), code) << "rank " << r << ": " << all[r].ToString();
    EXPECT_THAT(all[r].message(), HasSubstr(what)) << "rank " << r;
    EXPECT_EQ(all[r].ToString(), all[0].ToString()) << "rank " << r;
  }
}

class OneRankFailsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::vector<Status> st = RunThreadRanks(kRanks, [&](Comm& comm) {
      RankState s(comm.rank(), comm.rank() == 1);
      SaveOptions o;
      o.storage = mem_.get();
      return Save(s.state, "/ck", comm, o).status();
    });
    for (const Status& s : st) ASSERT_TRUE(s.ok()) << s.ToString();
  }

  // `edit` (if set) changes rank r's requests before its load.
  std::vector<Status> LoadAll(bool cooperative, const std::function<Storage*(int)>& storage,
                              const std::function<bool(int)>& wants_object,
                              const std::string& dir = "/ck",
                              const std::function<void(int, State&)>& edit = nullptr) {
    return RunThreadRanks(kRanks, [&](Comm& comm) {
      RankState s(comm.rank(), wants_object(comm.rank()));
      if (edit) edit(comm.rank(), s.state);
      LoadOptions o;
      o.storage = storage(comm.rank());
      o.cooperative = cooperative;
      o.allow_unexpected_keys = true;
      return Load(s.state, dir, comm, o).status();
    });
  }

  std::unique_ptr<Storage> mem_ = NewMemStorage();
};

TEST_F(OneRankFailsTest, SaveWhereOneRankThrows) {
  ThrowingStorage throwing(mem_.get(), "/data/2.");
  std::vector<Status> st = RunThreadRanks(kRanks, [&](Comm& comm) {
    RankState s(comm.rank(), false);
    SaveOptions o;
    o.storage = comm.rank() == 2 ? static_cast<Storage*>(&throwing) : mem_.get();
    return Save(s.state, "/ck2", comm, o).status();
  });
  ExpectEveryRankFails(st, StatusCode::kInternal, "rank 2: save: writing rank 2's data file: ");
  EXPECT_THAT(st[0].message(), HasSubstr("out of memory (std::bad_alloc)"));
  EXPECT_FALSE(*mem_->Exists("/ck2/manifest"));
}

TEST_F(OneRankFailsTest, SaveWhereOneRankStateIsWrong) {
  std::vector<Status> st = RunThreadRanks(kRanks, [&](Comm& comm) {
    RankState s(comm.rank(), comm.rank() == 1);
    if (comm.rank() == 1) s.state.objects[0].index = {3}, s.state.objects[0].grid = {2};
    SaveOptions o;
    o.storage = mem_.get();
    return Save(s.state, "/ck3", comm, o).status();
  });
  ExpectEveryRankFails(st, StatusCode::kInvalidArgument, "rank 1: object 'o': index [3]");
}

TEST_F(OneRankFailsTest, LoadWhereOneRankThrows) {
  for (bool cooperative : {false, true}) {
    SCOPED_TRACE(cooperative ? "cooperative" : "plain");
    ThrowingStorage throwing(mem_.get(), "/data/");
    std::vector<Status> st = LoadAll(
        cooperative, [&](int r) { return r == 1 ? static_cast<Storage*>(&throwing) : mem_.get(); },
        [](int) { return false; });
    ExpectEveryRankFails(st, StatusCode::kInternal, "rank 1: ");
    EXPECT_THAT(st[0].message(), HasSubstr("out of memory (std::bad_alloc)"));
  }
}

TEST_F(OneRankFailsTest, LoadWhereOneRankRequestsAWrongShape) {
  for (bool cooperative : {false, true}) {
    std::vector<Status> st = LoadAll(
        cooperative, [&](int) { return mem_.get(); }, [](int) { return false; }, "/ck",
        [](int r, State& state) {
          if (r == 2) state.tensors[0].segments[0].global_shape = {6, 5};
        });
    ExpectEveryRankFails(st, StatusCode::kInvalidArgument,
                         "rank 2: tensor 'w': requested global shape [6, 5]");
  }
}

// Only rank 2's plan fails (its box reaches past the tensor): the requests
// were fine everywhere, so the plain load carries the error into its final
// agreement (the other ranks read meanwhile) and the cooperative load agrees
// on the plans before its exchange; every rank returns rank 2's error.
TEST_F(OneRankFailsTest, LoadWhereOneRankCannotPlan) {
  for (bool cooperative : {false, true}) {
    SCOPED_TRACE(cooperative ? "cooperative" : "plain");
    std::vector<Status> st = LoadAll(
        cooperative, [&](int) { return mem_.get(); }, [](int) { return false; }, "/ck",
        [](int r, State& state) {
          if (r == 2) state.tensors[0].segments[0].global_box = Box({5, 0}, {2, 4});
        });
    ExpectEveryRankFails(st, StatusCode::kInvalidArgument,
                         "rank 2: tensor #0: segment 'w' global box: box [5:7, 0:4] lies outside "
                         "shape [6, 4]");
  }
}

// A cooperative load over several rounds (a 1 MiB block each) where rank
// 1's data reads fail: loading the saved layout (no bytes move, the error
// reaches the others in the agreement at the end) and loading the whole
// tensor on every rank (each block read once and sent to the others, the
// error in the status byte of the next exchange, so the others stop reading
// then). Every rank gets rank 1's IOError naming the file.
TEST_F(OneRankFailsTest, CooperativeLoadWhereOneRankCannotRead) {
  constexpr int64_t kRows = 12, kCols = 262144;  // rows of 1 MiB of F32
  auto state_of = [&](int r, bool whole, std::vector<float>* mem) {
    const int64_t rows = whole ? kRows : kRows / kRanks;
    mem->assign(static_cast<size_t>(rows * kCols), static_cast<float>(r));
    LocalTensor t;
    t.data = mem->data();
    t.shape = {rows, kCols};
    t.segments = {
        Segment{"big", {kRows, kCols}, Box({whole ? 0 : rows * r, 0}, {rows, kCols}), {0, 0}}};
    State st;
    st.tensors.push_back(t);
    return st;
  };
  std::vector<Status> saved = RunThreadRanks(kRanks, [&](Comm& comm) {
    std::vector<float> mem;
    SaveOptions o;
    o.storage = mem_.get();
    State st = state_of(comm.rank(), false, &mem);
    return Save(st, "/ck4", comm, o).status();
  });
  for (const Status& s : saved) ASSERT_TRUE(s.ok()) << s.ToString();
  // Each rank's reads through its own FaultStorage; rank 1's fail from its
  // second on (its first is the manifest's) where `fail`.
  auto load = [&](bool whole, bool fail, std::vector<int64_t>* reads) {
    std::vector<std::unique_ptr<internal_io::FaultStorage>> storages;
    for (int r = 0; r < kRanks; ++r) {
      storages.push_back(std::make_unique<internal_io::FaultStorage>(mem_.get()));
    }
    if (fail) storages[1]->FailReadsFrom(2);
    std::vector<Status> st = RunThreadRanks(kRanks, [&](Comm& comm) {
      std::vector<float> mem;
      LoadOptions o;
      o.storage = storages[comm.rank()].get();
      o.cooperative = true;
      o.cooperative_round_bytes = 1;  // a round per span
      o.io_threads = 1;
      State state = state_of(comm.rank(), whole, &mem);
      return Load(state, "/ck4", comm, o).status();
    });
    for (int r = 0; r < kRanks; ++r) reads->push_back(storages[r]->reads());
    return st;
  };
  for (bool whole : {false, true}) {
    SCOPED_TRACE(whole ? "whole tensor on every rank" : "saved layout");
    std::vector<int64_t> clean_reads, reads;
    for (const Status& s : load(whole, false, &clean_reads)) ASSERT_TRUE(s.ok()) << s.ToString();
    std::vector<Status> st = load(whole, true, &reads);
    ExpectEveryRankFails(st, StatusCode::kIOError, "rank 1: ");
    EXPECT_THAT(st[0].message(), HasSubstr("/ck4/data/"));
    EXPECT_THAT(st[0].message(), HasSubstr("Input/output error (injected)"));
    if (whole) {  // the others learnt it at the next exchange, not at the end
      EXPECT_LT(reads[0] + reads[2], clean_reads[0] + clean_reads[2])
          << reads[0] << " + " << reads[2] << " reads, " << clean_reads[0] << " + "
          << clean_reads[2] << " without the failure";
    }
  }
}

// A manifest whose object claims 2^38 bytes: the one rank that requests the
// object must not try to allocate them, and every rank gets its error.
TEST_F(OneRankFailsTest, LoadOfAnObjectLargerThanItsFile) {
  Result<internal_format::Manifest> m = internal_source::ReadManifest(mem_.get(), "/ck");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_EQ(m->objects.size(), 1u);
  m->objects[0].nbytes = uint64_t{1} << 38;
  ASSERT_TRUE(mem_->WriteStringToFile("/ck/manifest", internal_format::EncodeManifest(*m)).ok());
  for (bool cooperative : {false, true}) {
    std::vector<Status> st = LoadAll(
        cooperative, [&](int) { return mem_.get(); }, [](int r) { return r == 1; });
    ExpectEveryRankFails(st, StatusCode::kDataLoss, "rank 1: ");
    EXPECT_THAT(st[0].message(), HasSubstr("object 'o' in 'data/1.safetensors': bytes ["));
    EXPECT_THAT(st[0].message(), HasSubstr("lie beyond the end of the "));
  }
}

TEST_F(OneRankFailsTest, HfLoadWhereOneRankThrows) {
  HfTensor w{"w", DType::kF32, {6, 4}, std::string(6 * 4 * 4, '\1')};
  HfWriteOptions wo;
  wo.storage = mem_.get();
  ASSERT_TRUE(WriteHfModel("/hf", {w}, wo).ok());
  ThrowingStorage throwing(mem_.get(), "model.safetensors");
  std::vector<Status> st = RunThreadRanks(kRanks, [&](Comm& comm) {
    RankState s(comm.rank(), false);
    HfLoadOptions o;
    o.load.storage = comm.rank() == 1 ? static_cast<Storage*>(&throwing) : mem_.get();
    return LoadFromHf(s.state, "/hf", IdentityHfMapping(), comm, o).status();
  });
  ExpectEveryRankFails(st, StatusCode::kInternal, "rank 1: ");
  EXPECT_THAT(st[0].message(), HasSubstr("out of memory (std::bad_alloc)"));
}

TEST_F(OneRankFailsTest, ManagerWhereRankZeroThrows) {
  // The tracker update (rank 0 only) throws.
  ThrowingStorage throwing(mem_.get(), "latest");
  std::vector<Status> st = RunThreadRanks(kRanks, [&](Comm& comm) -> Status {
    ManagerOptions o;
    o.storage = comm.rank() == 0 ? static_cast<Storage*>(&throwing) : mem_.get();
    o.lock = false;
    SP_ASSIGN_OR_RETURN(auto m, CheckpointManager::Open("/run", comm, o));
    RankState s(comm.rank(), false);
    return m->Save(s.state, 5, comm).status();
  });
  ExpectEveryRankFails(st, StatusCode::kInternal,
                       "rank 0: checkpoint '/run/iter_0000005' committed (it is complete and "
                       "loads; resume finds it), but updating '/run/latest' failed: updating the "
                       "tracker: out of memory (std::bad_alloc)");
  // Resume: rank 0 cannot list the root.
  ThrowingStorage no_list(mem_.get(), "/run");
  st = RunThreadRanks(kRanks, [&](Comm& comm) -> Status {
    ManagerOptions o;
    o.storage = comm.rank() == 0 ? static_cast<Storage*>(&no_list) : mem_.get();
    o.lock = false;
    SP_ASSIGN_OR_RETURN(auto m, CheckpointManager::Open("/run", comm, o));
    RankState s(comm.rank(), false);
    return m->Resume(s.state, comm).status();
  });
  ExpectEveryRankFails(st, StatusCode::kInternal,
                       "rank 0: finding the latest checkpoint: out of memory (std::bad_alloc)");
}

}  // namespace
}  // namespace shardpoint
