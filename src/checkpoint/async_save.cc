// Async save (include/shardpoint/async_save.h).
//
// SaveAsync, on the caller's thread:
//   1. joins the previous background save (at most one in flight);
//   2. stages: every LocalTensor is copied into the pool as a contiguous
//      tensor with the same shape, segments and flat range (strided tensors
//      become row-major), objects and blobs are copied into a private State;
//   3. starts the background thread and returns.
// The background thread agrees on the staging status (a local failure, e.g.
// the pool bound, fails every rank instead of leaving the others in a
// collective), runs Save on the staged State, then `after_commit`. Its
// result is published to the handle.
#include "shardpoint/async_save.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <future>

#include "src/base/checked.h"
#include "src/geometry/view.h"
#include "src/io/staging_memory.h"

using shardpoint::internal_base::CheckedMul;
using shardpoint::internal_checkpoint::AsyncJob;
using shardpoint::internal_checkpoint::StagingPool;
using shardpoint::internal_geometry::ContiguousView;
using shardpoint::internal_geometry::StridedCopy;
using shardpoint::internal_geometry::View;
using shardpoint::internal_io::StagingMemory;

namespace shardpoint {
namespace internal_checkpoint {

struct StagingPool {
  StagingMemory memory;  // grown, never shrunk: reused by every save
};

struct AsyncJob {
  std::shared_future<Result<SaveStats>> result;
  double stall_seconds = 0;
  uint64_t staged_bytes = 0;
  bool pool_grew = false;
};

namespace {

constexpr size_t kStagingAlignment = 64;

double Since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

size_t AlignUp(size_t n) {
  return (n + kStagingAlignment - 1) / kStagingAlignment * kStagingAlignment;
}

// Bytes of the elements a LocalTensor holds.
Result<uint64_t> HeldBytes(const LocalTensor& t) {
  SP_RETURN_IF_ERROR(ValidateLocalTensor(t));
  const int64_t n = t.flat ? t.flat->size() : Box::Whole(t.shape).num_elements();
  std::optional<uint64_t> bytes = CheckedMul<uint64_t>(n, DTypeSize(t.dtype));
  if (!bytes) {
    return InvalidArgumentError("local tensor of shape " + ShapeToString(t.shape) +
                                " overflows a byte count");
  }
  return *bytes;
}

// Each tensor's offset in the pool (`offsets`, if not null) and the bytes
// the pool needs for them all.
Result<uint64_t> PoolLayout(const State& state, std::vector<size_t>* offsets) {
  if (offsets) offsets->assign(state.tensors.size(), 0);
  size_t need = 0;
  for (size_t i = 0; i < state.tensors.size(); ++i) {
    const LocalTensor& t = state.tensors[i];
    Result<uint64_t> bytes = HeldBytes(t);
    if (!bytes.ok()) return bytes.status().WithContext("async save: tensor #" + std::to_string(i));
    if (*bytes > 0 && t.data == nullptr) {
      return InvalidArgumentError("async save: tensor #" + std::to_string(i) + " ('" +
                                  (t.segments.empty() ? "" : t.segments[0].key) + "') has no data");
    }
    if (offsets) (*offsets)[i] = need;
    need = AlignUp(need + *bytes);
  }
  return need;
}

Status CheckBound(uint64_t need, const AsyncSaverOptions& options) {
  if (options.max_staging_bytes > 0 && need > options.max_staging_bytes) {
    return FailedPreconditionError(
        "async save: the state needs " + std::to_string(need) +
        " bytes of staging memory but AsyncSaverOptions::max_staging_bytes is " +
        std::to_string(options.max_staging_bytes));
  }
  return OkStatus();
}

// Makes `pool` hold at least `need` bytes; `grew` says whether it had to.
Status Grow(StagingPool* pool, uint64_t need, const AsyncSaverOptions& options, bool prefault,
            bool* grew) {
  *grew = false;
  if (pool->memory.size() >= need) return OkStatus();
  pool->memory = StagingMemory();  // free the old pool before mapping the new one
  SP_ASSIGN_OR_RETURN(pool->memory, StagingMemory::Map(need, options.huge_pages, prefault));
  *grew = true;
  return OkStatus();
}

// Copies `state` into `pool`; `staged` gets the same State over pool memory.
Status Stage(const State& state, const AsyncSaverOptions& options, StagingPool* pool, State* staged,
             uint64_t* total, bool* grew) {
  std::vector<size_t> offsets;
  SP_ASSIGN_OR_RETURN(const uint64_t need, PoolLayout(state, &offsets));
  *total = need;
  SP_RETURN_IF_ERROR(CheckBound(need, options));
  // The copy below faults the new pages in: no separate pass over them.
  SP_RETURN_IF_ERROR(Grow(pool, need, options, /*prefault=*/false, grew));
  staged->tensors.clear();
  staged->tensors.reserve(state.tensors.size());
  for (size_t i = 0; i < state.tensors.size(); ++i) {
    const LocalTensor& t = state.tensors[i];
    LocalTensor copy = t;
    copy.data = pool->memory.data() + offsets[i];
    copy.strides.clear();
    const size_t es = DTypeSize(t.dtype);
    if (t.flat || t.strides.empty()) {
      const int64_t n = t.flat ? t.flat->size() : Box::Whole(t.shape).num_elements();
      if (n > 0) std::memcpy(copy.data, t.data, static_cast<size_t>(n) * es);
    } else {
      View src{static_cast<char*>(t.data), es, t.shape, t.strides};
      for (int64_t& s : src.byte_strides) s *= static_cast<int64_t>(es);
      StridedCopy(ContiguousView(copy.data, es, t.shape), src);
    }
    staged->tensors.push_back(std::move(copy));
  }
  staged->objects = state.objects;
  staged->common = state.common;
  staged->metadata_json = state.metadata_json;
  return OkStatus();
}

}  // namespace
}  // namespace internal_checkpoint

using internal_checkpoint::CheckBound;
using internal_checkpoint::Grow;
using internal_checkpoint::PoolLayout;
using internal_checkpoint::Since;
using internal_checkpoint::Stage;

bool SaveHandle::Done() const {
  return job_ && job_->result.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
}

Result<SaveStats> SaveHandle::Wait() const {
  if (!job_) return FailedPreconditionError("SaveHandle::Wait on a handle with no save");
  return job_->result.get();
}

double SaveHandle::stall_seconds() const { return job_ ? job_->stall_seconds : 0; }
uint64_t SaveHandle::staged_bytes() const { return job_ ? job_->staged_bytes : 0; }
bool SaveHandle::pool_grew() const { return job_ && job_->pool_grew; }

AsyncSaver::AsyncSaver(AsyncSaverOptions options)
    : options_(options), pool_(std::make_unique<StagingPool>()) {}

AsyncSaver::~AsyncSaver() { (void)WaitForPending(); }

uint64_t AsyncSaver::pool_bytes() const { return pool_->memory.size(); }
bool AsyncSaver::pool_huge_pages() const { return pool_->memory.huge_pages(); }

Result<uint64_t> AsyncSaver::StagingBytes(const State& state) { return PoolLayout(state, nullptr); }

Status AsyncSaver::Reserve(uint64_t bytes) {
  SP_RETURN_IF_ERROR(CheckBound(bytes, options_));
  (void)WaitForPending();  // its outcome stays with its handle
  bool grew = false;
  return Grow(pool_.get(), bytes, options_, /*prefault=*/true, &grew);
}

Status AsyncSaver::Reserve(const State& state) {
  SP_ASSIGN_OR_RETURN(const uint64_t bytes, StagingBytes(state));
  return Reserve(bytes);
}

Status AsyncSaver::WaitForPending() {
  if (thread_.joinable()) thread_.join();
  if (!pending_) return OkStatus();
  Status s = pending_->result.get().status();
  pending_.reset();
  return s;
}

SaveHandle AsyncSaver::Save(const State& state, const std::string& dir, Comm& comm,
                            const SaveOptions& options,
                            std::function<Status(const SaveStats&)> after_commit) {
  const auto start = std::chrono::steady_clock::now();
  (void)WaitForPending();  // the previous outcome stays with its handle

  auto job = std::make_shared<AsyncJob>();
  auto staged = std::make_shared<State>();
  uint64_t total = 0;
  bool grew = false;
  Status staging = Stage(state, options_, pool_.get(), staged.get(), &total, &grew);
  job->staged_bytes = staging.ok() ? total : 0;
  job->pool_grew = grew;
  job->stall_seconds = Since(start);

  std::promise<Result<SaveStats>> promise;
  job->result = promise.get_future().share();
  if (options.log && comm.rank() == 0 && staging.ok()) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "staged %.3f GB in %.3f s; writing in the background",
                  static_cast<double>(total) / 1e9, job->stall_seconds);
    options.log("shardpoint: async save of '" + dir + "' " + buf);
  }
  thread_ =
      std::thread([staged, staging, dir, &comm, options, after_commit = std::move(after_commit),
                   promise = std::move(promise)]() mutable {
        Result<SaveStats> result = [&]() -> Result<SaveStats> {
          Status agreed = AgreeOnStatus(comm, staging);
          if (!agreed.ok()) {
            if (options.log && comm.rank() == 0) {
              options.log("shardpoint: async save of '" + dir +
                          "' FAILED before writing (not committed): " + agreed.ToString());
            }
            return agreed;
          }
          SP_ASSIGN_OR_RETURN(SaveStats stats, shardpoint::Save(*staged, dir, comm, options));
          if (after_commit) SP_RETURN_IF_ERROR(after_commit(stats));
          return stats;
        }();
        staged.reset();
        // Its captures (a CheckpointManager and so its lock, for one) go before
        // the handle reports the save done, not when this thread ends.
        after_commit = nullptr;
        promise.set_value(std::move(result));
      });
  pending_ = job;
  return SaveHandle(job);
}

}  // namespace shardpoint
