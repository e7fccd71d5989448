#include "src/io/thread_pool.h"

#include <atomic>
#include <chrono>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace shardpoint::internal_io {
namespace {

TEST(ThreadPoolTest, SubmitReturnsTheStatus) {
  ThreadPool pool(3);
  EXPECT_EQ(pool.num_threads(), 3);
  std::future<Status> ok = pool.Submit([] { return OkStatus(); });
  std::future<Status> bad = pool.Submit([] { return IOError("disk"); });
  EXPECT_TRUE(ok.get().ok());
  EXPECT_EQ(bad.get().message(), "disk");
}

TEST(ThreadPoolTest, DestructorRunsQueuedTasks) {
  std::atomic<int> ran{0};
  {
    ThreadPool pool(1);
    for (int i = 0; i < 100; ++i) {
      pool.Submit([&ran] {
            ++ran;
            return OkStatus();
          })
          .wait_for(std::chrono::seconds(0));
    }
  }
  EXPECT_EQ(ran.load(), 100);
}

TEST(ParallelForTest, CoversEveryIndexOnce) {
  for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), new ThreadPool(4)}) {
    for (int64_t n : {0, 1, 2, 7, 1000}) {
      std::vector<std::atomic<int>> hits(n);
      Status s = ParallelFor(pool, n, [&hits](int64_t i) {
        ++hits[i];
        return OkStatus();
      });
      EXPECT_TRUE(s.ok());
      for (int64_t i = 0; i < n; ++i) EXPECT_EQ(hits[i].load(), 1) << "index " << i;
    }
    delete pool;
  }
}

TEST(ParallelForTest, ReturnsTheLowestIndexError) {
  ThreadPool pool(4);
  for (int round = 0; round < 20; ++round) {
    Status s = ParallelFor(&pool, 1000, [](int64_t i) {
      if (i == 900 || i == 500 || i == 7) return IOError("index " + std::to_string(i));
      return OkStatus();
    });
    EXPECT_EQ(s.message(), "index 7");
  }
  Status serial = ParallelFor(nullptr, 10, [](int64_t i) {
    return i >= 3 ? IOError("index " + std::to_string(i)) : OkStatus();
  });
  EXPECT_EQ(serial.message(), "index 3");
}

TEST(ParallelForTest, WaitsForRunningTasksBeforeReturning) {
  ThreadPool pool(4);
  std::atomic<int> finished{0};
  Status s = ParallelFor(&pool, 8, [&finished](int64_t i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(i == 0 ? 0 : 20));
    ++finished;
    return i == 0 ? IOError("first") : OkStatus();
  });
  EXPECT_EQ(s.message(), "first");
  // Indices claimed before the error ran to completion before ParallelFor
  // returned: nothing may still be running and touching the caller's state.
  int seen = finished.load();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(finished.load(), seen);
}

TEST(ParallelForTest, NestedCallsDoNotDeadlock) {
  for (int threads : {1, 2, 8}) {
    ThreadPool pool(threads);
    std::atomic<int64_t> sum{0};
    Status s = ParallelFor(&pool, 16, [&](int64_t i) {
      return ParallelFor(&pool, 100, [&](int64_t j) {
        sum += i * 100 + j;
        return OkStatus();
      });
    });
    EXPECT_TRUE(s.ok());
    EXPECT_EQ(sum.load(), 1600 * 1599 / 2);
  }
}

TEST(ParallelForTest, CalledFromInsideASubmittedTask) {
  ThreadPool pool(2);
  std::atomic<int> count{0};
  std::vector<std::future<Status>> futures;
  for (int t = 0; t < 4; ++t) {
    futures.push_back(pool.Submit([&] {
      return ParallelFor(&pool, 50, [&](int64_t) {
        ++count;
        return OkStatus();
      });
    }));
  }
  for (std::future<Status>& f : futures) EXPECT_TRUE(f.get().ok());
  EXPECT_EQ(count.load(), 200);
}

TEST(AheadTest, RunsOnAFreePoolThread) {
  ThreadPool pool(1);
  std::atomic<bool> in_pool{false}, ran{false};
  Ahead ahead(&pool, [&] {
    in_pool = pool.InPool();
    ran = true;
  });
  while (!ran) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ahead.Wait();
  EXPECT_TRUE(in_pool);
}

// The pool's only thread is busy until the waiter has finished: the waiter
// runs the work itself instead of waiting for a thread (no deadlock).
TEST(AheadTest, TheWaiterRunsItWhenThePoolIsBusy) {
  ThreadPool pool(1);
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<bool> busy{false};
  pool.Submit([&] {
    busy = true;
    released.wait();
    return OkStatus();
  });
  while (!busy) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  int runs = 0;
  bool in_pool = true;
  {
    Ahead ahead(&pool, [&] {
      ++runs;
      in_pool = pool.InPool();
    });
    ahead.Wait();
    EXPECT_EQ(runs, 1);
    EXPECT_FALSE(in_pool);
    release.set_value();
  }  // the queued pool task finds it claimed and does nothing
  pool.Submit([] { return OkStatus(); }).wait();
  EXPECT_EQ(runs, 1);
}

TEST(AheadTest, WithoutAPoolWaitRunsItAndTheDestructorWaits) {
  int runs = 0;
  {
    Ahead ahead(nullptr, [&] { ++runs; });
    EXPECT_EQ(runs, 0);
  }
  EXPECT_EQ(runs, 1);
  Ahead twice(nullptr, [&] { ++runs; });
  twice.Wait();
  twice.Wait();
  EXPECT_EQ(runs, 2);
}

}  // namespace
}  // namespace shardpoint::internal_io
