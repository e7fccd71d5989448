// LoadOptions::tensor_groups: a resharded load reads its tensors group by
// group and announces each group once every byte of it is placed, before it
// touches the next group's tensors (what lets a CUDA load copy one group to
// the device while it reads the next).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "shardpoint/checkpoint.h"
#include "tests/testing/reference.h"
#include "tests/testing/transformer.h"

namespace shardpoint {
namespace {

using testing::ParallelConfig;

constexpr unsigned char kUntouched = 0xAB;

// The bytes of a local tensor's memory (contiguous or a flat range).
uint64_t ExtentBytes(const LocalTensor& t) {
  const int64_t n = t.flat ? t.flat->end - t.flat->begin : Box::Whole(t.shape).num_elements();
  return static_cast<uint64_t>(n) * DTypeSize(t.dtype);
}

bool Untouched(const LocalTensor& t) {
  const auto* p = static_cast<const unsigned char*>(t.data);
  for (uint64_t i = 0; i < ExtentBytes(t); ++i) {
    if (p[i] != kUntouched) return false;
  }
  return true;
}

class TensorGroupsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/shardpoint_groups_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    dir_ = root_ + "/ckpt";
    ref_ = testing::MakeReference(model_, 7);
    std::vector<testing::RankState> src(from_.world());
    for (int r = 0; r < from_.world(); ++r) {
      auto rs = testing::BuildRankState(model_, from_, r);
      ASSERT_TRUE(rs.ok()) << rs.status().ToString();
      src[r] = std::move(*rs);
      ASSERT_TRUE(testing::FillFromReference(ref_, src[r].state.tensors).ok());
    }
    for (const Status& s : RunThreadRanks(from_.world(), [&](Comm& comm) {
           return Save(src[comm.rank()].state, dir_, comm).status();
         })) {
      ASSERT_TRUE(s.ok()) << s.ToString();
    }
    dst_ = Destination(to_);  // TP=4 saved, TP=2 x DP=2 loads
  }

  // Every rank's tensors of `to`, filled with kUntouched.
  std::vector<testing::RankState> Destination(const ParallelConfig& to) const {
    std::vector<testing::RankState> dst;
    for (int r = 0; r < to.world(); ++r) {
      auto rs = testing::BuildRankState(model_, to, r);
      EXPECT_TRUE(rs.ok());
      dst.push_back(std::move(*rs));
      State& st = dst.back().state;
      st.objects.clear();
      st.common.reset();
      for (LocalTensor& t : st.tensors) std::memset(t.data, kUntouched, ExtentBytes(t));
    }
    return dst;
  }

  // A cooperative load of `dst` in small rounds, groups of five tensors in
  // state order; checks that each group is complete when announced and that
  // every group is announced once (in the order they complete). Returns how
  // many announcements came while another group's tensor was still untouched.
  int CooperativeLoadInGroups(std::vector<testing::RankState>& dst) {
    const int world = static_cast<int>(dst.size());
    std::mutex mu;
    std::vector<std::string> failures;
    std::vector<std::vector<int>> called(world);
    int early = 0;
    std::vector<Status> st = RunThreadRanks(world, [&](Comm& comm) {
      State& state = dst[comm.rank()].state;
      LoadOptions o;  // cooperative by default
      o.allow_unexpected_keys = true;
      o.cooperative_round_bytes = 64 << 10;  // many rounds
      for (size_t i = 0; i < state.tensors.size(); ++i) o.tensor_groups.push_back(i / 5);
      o.on_group_loaded = [&, r = comm.rank()](int g) {
        called[r].push_back(g);
        std::vector<LocalTensor> done;
        bool other_untouched = false;
        for (size_t i = 0; i < state.tensors.size(); ++i) {
          if (o.tensor_groups[i] == g) done.push_back(state.tensors[i]);
          if (o.tensor_groups[i] != g && Untouched(state.tensors[i])) other_untouched = true;
        }
        Status c = testing::CheckAgainstReference(ref_, done);
        std::lock_guard<std::mutex> lock(mu);
        early += other_untouched;
        if (!c.ok()) {
          failures.push_back("rank " + std::to_string(r) + ", group " + std::to_string(g) + ": " +
                             c.ToString());
        }
      };
      return Load(state, dir_, comm, o).status();
    });
    for (const Status& s : st) EXPECT_TRUE(s.ok()) << s.ToString();
    EXPECT_TRUE(failures.empty()) << failures[0];
    for (int r = 0; r < world; ++r) {
      std::vector<int> want;
      for (size_t i = 0; i < dst[r].state.tensors.size(); i += 5) want.push_back(i / 5);
      std::sort(called[r].begin(), called[r].end());
      EXPECT_EQ(called[r], want) << "rank " << r;  // every group once
    }
    return early;
  }
  void TearDown() override { ASSERT_TRUE(DefaultStorage()->RemoveAll(root_).ok()); }

  // Groups 0, 2, 4, ... by tensor index, in reverse (the last tensors first):
  // the odd groups have no tensors.
  std::vector<int> Groups(const State& st) const {
    std::vector<int> g(st.tensors.size());
    for (size_t i = 0; i < g.size(); ++i) g[i] = 2 * static_cast<int>((g.size() - 1 - i) / 5);
    return g;
  }

  testing::ModelConfig model_{2, 64, 256, 1000};
  ParallelConfig from_{4, 1, 1, false};
  ParallelConfig to_{2, 1, 2, false};
  testing::RefModel ref_;
  std::string root_, dir_;
  std::vector<testing::RankState> dst_;
};

TEST_F(TensorGroupsTest, EachGroupIsCompleteWhenAnnouncedAndTheNextIsNotYetTouched) {
  std::mutex mu;
  std::vector<std::string> failures;
  std::vector<std::vector<int>> called(to_.world());
  std::vector<Status> st = RunThreadRanks(to_.world(), [&](Comm& comm) {
    State& state = dst_[comm.rank()].state;
    LoadOptions o;
    o.cooperative = false;
    o.allow_unexpected_keys = true;  // the per-rank RNG objects are not loaded
    o.tensor_groups = Groups(state);
    o.on_group_loaded = [&, r = comm.rank()](int g) {
      called[r].push_back(g);
      std::vector<LocalTensor> done;
      for (size_t i = 0; i < state.tensors.size(); ++i) {
        if (o.tensor_groups[i] <= g) done.push_back(state.tensors[i]);
        if (o.tensor_groups[i] > g && !Untouched(state.tensors[i])) {
          std::lock_guard<std::mutex> lock(mu);
          failures.push_back("rank " + std::to_string(r) + ": tensor " + std::to_string(i) +
                             " of a later group written before group " + std::to_string(g) +
                             " was announced");
        }
      }
      Status c = testing::CheckAgainstReference(ref_, done);
      if (!c.ok()) {
        std::lock_guard<std::mutex> lock(mu);
        failures.push_back("rank " + std::to_string(r) + ", group " + std::to_string(g) + ": " +
                           c.ToString());
      }
    };
    return Load(state, dir_, comm, o).status();
  });
  for (const Status& s : st) ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(failures.empty()) << failures[0];
  for (int r = 0; r < to_.world(); ++r) {
    const std::vector<int> g = Groups(dst_[r].state);
    std::vector<int> want;
    for (int i = 0; i <= g[0]; ++i) want.push_back(i);  // g[0] is the largest
    EXPECT_EQ(called[r], want) << "rank " << r;  // every group once, in order, empty ones too
    Status c = testing::CheckAgainstReference(ref_, dst_[r].state.tensors);
    EXPECT_TRUE(c.ok()) << c.ToString();
  }
}

TEST_F(TensorGroupsTest, ACooperativeLoadAnnouncesEachGroupOnceTheRoundsPlacedIt) {
  // Resharded (TP=2 x DP=2): every tensor has bytes in every file, which the
  // rounds read in turn, so the groups complete in the later rounds.
  CooperativeLoadInGroups(dst_);
}

TEST_F(TensorGroupsTest, ACooperativeLoadAnnouncesGroupsBeforeItsLastRound) {
  // TP=4 x DP=2: the two replicas of each TP rank share one file's blocks;
  // a group whose bytes the early rounds read goes out while other groups
  // are still unread.
  std::vector<testing::RankState> dst = Destination(ParallelConfig{4, 1, 2, false});
  EXPECT_GT(CooperativeLoadInGroups(dst), 0);
}

TEST_F(TensorGroupsTest, GroupsThatDoNotFitTheStateAreEveryRanksError) {
  for (int bad : {0, 1}) {
    std::vector<Status> st = RunThreadRanks(to_.world(), [&](Comm& comm) {
      State& state = dst_[comm.rank()].state;
      LoadOptions o;
      o.tensor_groups = Groups(state);
      if (comm.rank() == 1 && bad == 0) o.tensor_groups.pop_back();
      if (comm.rank() == 1 && bad == 1) o.tensor_groups[3] = -1;
      o.on_group_loaded = [](int) { ADD_FAILURE() << "announced a group of a failed load"; };
      return Load(state, dir_, comm, o).status();
    });
    const std::string want = bad == 0 ? "tensor_groups has " : "tensor_groups[3] is negative: -1";
    for (const Status& s : st) {
      EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
      EXPECT_NE(s.message().find(want), std::string::npos) << s.ToString();
    }
  }
}

}  // namespace
}  // namespace shardpoint
