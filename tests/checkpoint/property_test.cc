// The randomized property: any layout saved, loaded under any other layout,
// gives back every byte. Seeded; a failure prints the seed and case to rerun:
//   SHARDPOINT_SEED=<seed> SHARDPOINT_CASES=<n> ./shardpoint_tests --gtest_filter='Property*'
#include <gtest/gtest.h>

#include <cstdlib>
#include <random>

#include "shardpoint/checkpoint.h"
#include "tests/testing/random_layout.h"

namespace shardpoint {
namespace {

uint64_t EnvOr(const char* name, uint64_t dflt) {
  const char* v = std::getenv(name);
  return v ? std::strtoull(v, nullptr, 10) : dflt;
}

Status First(const std::vector<Status>& all) {
  for (const Status& s : all) {
    if (!s.ok()) return s;
  }
  return OkStatus();
}

TEST(PropertyTest, AnyLayoutReloadsBitForBitUnderAnyOtherLayout) {
  const uint64_t seed = EnvOr("SHARDPOINT_SEED", 20261122);
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  // Instrumented builds run a third of the cases (the main build runs all):
  // they look for memory errors on the same paths, ~3x slower per case.
  const uint64_t cases = EnvOr("SHARDPOINT_CASES", 1000);
#else
  const uint64_t cases = EnvOr("SHARDPOINT_CASES", 3000);
#endif
  std::printf("property test: seed %llu, %llu cases\n", static_cast<unsigned long long>(seed),
              static_cast<unsigned long long>(cases));
  std::unique_ptr<Storage> storage = NewMemStorage();
  for (uint64_t c = 0; c < cases; ++c) {
    std::mt19937_64 rng(seed * 1000003 + c);
    const testing::RefModel model = testing::RandomModel(rng);
    const int save_ranks = std::uniform_int_distribution<int>(1, 6)(rng);
    const int load_ranks = std::uniform_int_distribution<int>(1, 6)(rng);
    std::vector<testing::RandomRank> src = testing::RandomLayout(model, save_ranks, rng);
    std::vector<testing::RandomRank> dst = testing::RandomLayout(model, load_ranks, rng);
    const std::string dir = "/ckpt/" + std::to_string(c);
    SCOPED_TRACE("seed " + std::to_string(seed) + " case " + std::to_string(c) + ": " +
                 std::to_string(save_ranks) + " -> " + std::to_string(load_ranks) + " ranks");
    for (auto& r : src) ASSERT_TRUE(testing::FillFromReference(model, r.state.tensors).ok());

    SaveOptions so;
    so.storage = storage.get();
    so.io_threads = 1;
    so.staging_bytes = 4096;  // many buffer boundaries inside chunks
    Status saved = First(RunThreadRanks(save_ranks, [&](Comm& comm) {
      return Save(src[comm.rank()].state, dir, comm, so).status();
    }));
    ASSERT_TRUE(saved.ok()) << saved.ToString();

    LoadOptions lo;
    lo.storage = storage.get();
    lo.io_threads = 2;
    // A load layout may request only some tensors' shards on some ranks; every
    // key is requested by some rank, so nothing is unexpected.
    Status loaded = First(RunThreadRanks(load_ranks, [&](Comm& comm) {
      return Load(dst[comm.rank()].state, dir, comm, lo).status();
    }));
    ASSERT_TRUE(loaded.ok()) << loaded.ToString();
    for (int r = 0; r < load_ranks; ++r) {
      Status s = testing::CheckAgainstReference(model, dst[r].state.tensors);
      ASSERT_TRUE(s.ok()) << "load rank " << r << ": " << s.ToString();
    }
    ASSERT_TRUE(storage->RemoveAll(dir).ok());
  }
}

}  // namespace
}  // namespace shardpoint
