// DiffCheckpoints: two sources compared key by key, block by block.
#include <cmath>
#include <cstring>
#include <memory>
#include <mutex>
#include <utility>

#include "shardpoint/hf.h"
#include "src/convert/read_box.h"
#include "src/geometry/convert.h"
#include "src/io/resources.h"
#include "src/io/thread_pool.h"
#include "src/source/mapped_source.h"

using shardpoint::internal_checkpoint::DataFiles;
using shardpoint::internal_convert::ReadBoxRange;
using shardpoint::internal_format::TensorRecord;
using shardpoint::internal_geometry::ConvertElements;
using shardpoint::internal_io::CallResources;
using shardpoint::internal_io::ParallelFor;
using shardpoint::internal_source::MappedSource;
using shardpoint::internal_source::OpenSource;

namespace shardpoint {

bool DiffReport::equal() const {
  for (const DiffEntry& e : entries) {
    if (e.kind != DiffEntry::kEqual) return false;
  }
  return true;
}

namespace {

struct Job {
  size_t entry;
  const TensorRecord* a;
  const TensorRecord* b;
  int64_t begin, end;
};

// Opens both sides. A Megatron checkpoint's args (its source_vars) are the
// defaults of the HF model it is compared with, below that model's own
// config.json and --set: a Megatron checkpoint and its export (which has no
// config.json) compare without --set, as the export ran without it.
Result<std::pair<MappedSource, MappedSource>> OpenPair(Storage* storage, const std::string& a_dir,
                                                       const std::string& b_dir,
                                                       const HfMapping& mapping,
                                                       const internal_hf::Vars& vars) {
  Result<MappedSource> a = OpenSource(storage, a_dir, mapping, vars);
  if (a.ok()) {
    SP_ASSIGN_OR_RETURN(MappedSource b, OpenSource(storage, b_dir, mapping, vars, a->source_vars));
    return std::make_pair(std::move(*a), std::move(b));
  }
  // A may be the HF side, needing B's variables.
  Result<MappedSource> b = OpenSource(storage, b_dir, mapping, vars);
  if (!b.ok() || b->source_vars.empty()) return a.status();
  SP_ASSIGN_OR_RETURN(MappedSource a2, OpenSource(storage, a_dir, mapping, vars, b->source_vars));
  return std::make_pair(std::move(a2), std::move(*b));
}

Result<DiffReport> Diff(const std::string& a_dir, const std::string& b_dir,
                        const HfMapping& mapping, const DiffOptions& options, CallResources& res) {
  Storage* storage = res.storage();
  SP_ASSIGN_OR_RETURN(auto ab, OpenPair(storage, a_dir, b_dir, mapping, options.variables));
  MappedSource& a = ab.first;
  MappedSource& b = ab.second;
  DiffReport report;
  std::vector<Job> jobs;
  size_t i = 0, j = 0;
  while (i < a.index.tensors.size() || j < b.index.tensors.size()) {
    const TensorRecord* ta = i < a.index.tensors.size() ? &a.index.tensors[i] : nullptr;
    const TensorRecord* tb = j < b.index.tensors.size() ? &b.index.tensors[j] : nullptr;
    DiffEntry e;
    if (ta && (!tb || ta->key < tb->key)) {
      e.key = ta->key, e.kind = DiffEntry::kOnlyA, ++i;
    } else if (tb && (!ta || tb->key < ta->key)) {
      e.key = tb->key, e.kind = DiffEntry::kOnlyB, ++j;
    } else {
      e.key = ta->key, ++i, ++j;
      if (ta->shape != tb->shape) {
        e.kind = DiffEntry::kMismatch;
        e.note = "shape " + ShapeToString(ta->shape) + " vs " + ShapeToString(tb->shape);
      } else {
        if (ta->dtype != tb->dtype) {
          e.note = "dtype " + std::string(DTypeName(ta->dtype)) + " vs " +
                   std::string(DTypeName(tb->dtype)) + " (compared as F64)";
        }
        const int64_t n = Box::Whole(ta->shape).num_elements();
        const int64_t block = std::max<int64_t>(1, options.block_bytes / 8);
        for (int64_t s = 0; s < n; s += block) {
          jobs.push_back({report.entries.size(), ta, tb, s, std::min(n, s + block)});
        }
      }
    }
    report.entries.push_back(std::move(e));
  }

  DataFiles fa(storage, a.dir, &a.index, &a.views), fb(storage, b.dir, &b.index, &b.views);
  std::mutex mu;
  // The calling thread compares too: io_threads - 1 threads of its own.
  ThreadPool* pool = res.pool(std::max(1, res.io_threads() - 1));
  SP_RETURN_IF_ERROR(ParallelFor(pool, static_cast<int64_t>(jobs.size()), [&](int64_t k) -> Status {
    const Job& job = jobs[k];
    const int64_t n = job.end - job.begin;
    const Box whole = Box::Whole(job.a->shape);
    const bool same = job.a->dtype == job.b->dtype && options.atol == 0;
    const DType da = same ? job.a->dtype : DType::kF64, db = same ? job.b->dtype : DType::kF64;
    const size_t es = DTypeSize(da);
    std::unique_ptr<char[]> x(new char[n * es]), y(new char[n * es]);
    SP_RETURN_IF_ERROR(ReadBoxRange(a, &fa, job.a->key, whole, job.begin, job.end, da, x.get()));
    SP_RETURN_IF_ERROR(ReadBoxRange(b, &fb, job.b->key, whole, job.begin, job.end, db, y.get()));
    if (same && std::memcmp(x.get(), y.get(), n * es) == 0) return OkStatus();
    // Element by element, in f64.
    std::unique_ptr<double[]> fx, fy;
    const double* vx = reinterpret_cast<const double*>(x.get());
    const double* vy = reinterpret_cast<const double*>(y.get());
    if (same) {
      fx.reset(new double[n]);
      fy.reset(new double[n]);
      ConvertElements(da, x.get(), DType::kF64, fx.get(), n);
      ConvertElements(db, y.get(), DType::kF64, fy.get(), n);
      vx = fx.get(), vy = fy.get();
    }
    int64_t count = 0;
    double max_abs = 0;
    for (int64_t e = 0; e < n; ++e) {
      const bool nx = std::isnan(vx[e]), ny = std::isnan(vy[e]);
      double d = nx && ny ? 0 : (nx || ny ? INFINITY : std::fabs(vx[e] - vy[e]));
      bool differs =
          same ? std::memcmp(x.get() + e * es, y.get() + e * es, es) != 0 : d > options.atol;
      if (!differs) continue;
      ++count;
      if (d > max_abs) max_abs = d;
    }
    if (count == 0) return OkStatus();
    std::lock_guard<std::mutex> lock(mu);
    DiffEntry& entry = report.entries[job.entry];
    entry.kind = DiffEntry::kDifferent;
    entry.num_different += count;
    entry.max_abs_diff = std::max(entry.max_abs_diff, max_abs);
    return OkStatus();
  }));
  return report;
}

}  // namespace

Result<DiffReport> DiffCheckpoints(const std::string& a_dir, const std::string& b_dir,
                                   const HfMapping& mapping, const DiffOptions& options) {
  // The deprecated `threads` wins when set.
  CallResources res(options, options.threads);
  Result<DiffReport> r = Diff(a_dir, b_dir, mapping, options, res);
  const std::string head = "shardpoint: diff '" + a_dir + "' '" + b_dir + "'";
  if (!r.ok()) {
    res.Log(head + " FAILED: " + r.status().ToString());
  } else {
    int64_t differ = 0;
    for (const DiffEntry& e : r->entries) differ += e.kind != DiffEntry::kEqual;
    res.Log(head + ": " + std::to_string(r->entries.size()) + " keys, " +
            (differ == 0 ? std::string("equal") : std::to_string(differ) + " differ"));
  }
  return r;
}

}  // namespace shardpoint
