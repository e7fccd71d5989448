#include "src/objstore/md5_shared.h"

#include <openssl/evp.h>

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

#include "src/objstore/md5_lanes.h"

namespace shardpoint::internal_objstore {
namespace {

// A turn runs a lane set for at most this many blocks (256 KiB per lane):
// long enough that taking turns costs nothing measurable, short enough that
// a newly arrived part soon gets a lane.
constexpr uint64_t kTurnBlocks = 4096;
// Fewer calls than this at once hash alone (OpenSSL, in parallel): 8 lanes
// cost about as much as 4 scalar hashes, so 1 or 2 messages gain nothing
// from lanes and would lose the second core.
constexpr int kLanesFrom = 3;

// A call's job and whether it is done; `job` first, so that a finished
// Md5Job* is its Waiting*.
struct Waiting {
  Md5Job job;
  bool done = false;
};
static_assert(std::is_standard_layout_v<Waiting>);

struct LaneSet {
  Md5Lanes lanes;
  bool running = false;           // a thread is running it
  std::vector<Md5Job*> finished;  // only the running thread touches it
};

// Calls wait in a queue; a waiting thread runs a lane set (its jobs and any
// queued ones) until its own job is done, then leaves the set to another
// waiting thread. One set per 8 calls in progress run at once, at most one
// per hardware thread.
class Combiner {
 public:
  Combiner() {
    const char* lanes = std::getenv("SHARDPOINT_MD5_LANES");
    lanes_from_ = lanes != nullptr && std::strcmp(lanes, "0") == 0 ? INT32_MAX : kLanesFrom;
    const int sets = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
    for (int i = 0; i < sets; ++i) sets_.push_back(std::make_unique<LaneSet>());
  }

  void Hash(Waiting* w) {
    std::unique_lock<std::mutex> lock(mu_);
    if (calls_ + 1 < lanes_from_) {
      ++calls_;
      lock.unlock();
      Alone(&w->job);
      lock.lock();
      --calls_;
      return;
    }
    ++calls_;
    queue_.push_back(w);
    while (!w->done) {
      LaneSet* set = Pick();
      if (set == nullptr) {
        cv_.wait(lock);
        continue;
      }
      set->running = true;
      ++running_;
      while (!w->done) {
        while (!set->lanes.full() && !queue_.empty()) {
          set->lanes.Add(&queue_.front()->job);
          queue_.pop_front();
        }
        if (set->lanes.empty()) break;  // this call's job is in another set
        lock.unlock();
        set->finished.clear();
        set->lanes.Run(kTurnBlocks, &set->finished);
        lock.lock();
        for (Md5Job* j : set->finished) reinterpret_cast<Waiting*>(j)->done = true;
        if (!set->finished.empty()) cv_.notify_all();
      }
      set->running = false;
      --running_;
      if (!set->lanes.empty() || !queue_.empty()) cv_.notify_all();
    }
    --calls_;
  }

 private:
  // Under mu_: a set for this thread to run, or nullptr (wait): first a set
  // with jobs that nobody runs; else, for queued jobs, an idle set if the
  // running ones are fewer than one per 8 calls in progress.
  LaneSet* Pick() {
    for (auto& s : sets_) {
      if (!s->running && !s->lanes.empty()) return s.get();
    }
    if (queue_.empty() || (running_ > 0 && running_ * kMd5Lanes >= calls_)) return nullptr;
    for (auto& s : sets_) {
      if (!s->running) return s.get();
    }
    return nullptr;
  }

  static void Alone(Md5Job* job) {
    unsigned int n = 0;
    if (EVP_Digest(job->data, job->size, job->digest, &n, EVP_md5(), nullptr) != 1) {
      Md5Digest(job->data, job->size, job->digest);  // OpenSSL out of memory: the scalar path
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Waiting*> queue_;
  std::vector<std::unique_ptr<LaneSet>> sets_;
  int lanes_from_;   // kLanesFrom; never (every call alone) with SHARDPOINT_MD5_LANES=0
  int calls_ = 0;    // calls in progress, alone or not
  int running_ = 0;  // sets being run
};

}  // namespace

void SharedMd5(const void* data, uint64_t size, unsigned char digest[16]) {
  static Combiner* combiner = new Combiner();  // never destroyed: threads may hash at exit
  Waiting w;
  w.job = Md5Job{static_cast<const unsigned char*>(data), size, {}};
  combiner->Hash(&w);
  for (int i = 0; i < 16; ++i) digest[i] = w.job.digest[i];
}

}  // namespace shardpoint::internal_objstore
