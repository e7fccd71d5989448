#include "src/checkpoint/reader.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <sstream>

#include "src/format/checksum.h"
#include "src/geometry/convert.h"
#include "src/geometry/view_range.h"
#include "src/io/aligned_buffer.h"
#include "src/io/memory_view.h"
#include "src/io/path.h"
#include "src/io/raw_buffer.h"
#include "src/io/staging_memory.h"
#include "src/plan/read_tasks.h"

using shardpoint::internal_format::Checksum64;
using shardpoint::internal_format::ChecksumState;
using shardpoint::internal_format::ChunkRecord;
using shardpoint::internal_format::Manifest;
using shardpoint::internal_format::TensorRecord;
using shardpoint::internal_format::VerifyBlock;
using shardpoint::internal_geometry::ConvertElements;
using shardpoint::internal_geometry::ScatterFlatRange;
using shardpoint::internal_io::JoinPath;
using shardpoint::internal_io::kDirectIoAlignment;
using shardpoint::internal_io::ParallelFor;
using shardpoint::internal_io::RawBuffer;
using shardpoint::internal_plan::BuildReadTasks;
using shardpoint::internal_plan::ChunkReads;
using shardpoint::internal_plan::LoadPlan;
using shardpoint::internal_plan::ReadPiece;
using shardpoint::internal_plan::ReadSegment;
using shardpoint::internal_plan::ReadTask;
using shardpoint::internal_plan::ReadTaskOptions;
using shardpoint::internal_plan::RunPattern;
using shardpoint::internal_plan::RunsOf;
using shardpoint::internal_plan::RunStart;

namespace shardpoint::internal_checkpoint {

struct DataFiles::Impl {
  Storage* storage;
  std::string dir;
  const Manifest* m;
  const std::vector<internal_dcp::StridedView>* views;
  bool direct;
  std::mutex mu;
  std::vector<std::unique_ptr<ReadableFile>> open;

  // REQUIRES: mu held.
  Result<const ReadableFile*> Open(uint32_t file) {
    if (file >= open.size()) return InternalError("file index out of range");
    if (open[file]) return open[file].get();
    const std::string path = JoinPath(dir, m->files[file]);
    if (views) {
      for (const internal_dcp::StridedView& v : *views) {
        if (v.file != file) continue;
        if (v.base == file) return InternalError("a strided view of itself");
        SP_ASSIGN_OR_RETURN(const ReadableFile* base, Open(v.base));
        open[file] = internal_dcp::OpenStridedView(v, base, path);
        return open[file].get();
      }
    }
    if (direct) {
      SP_ASSIGN_OR_RETURN(open[file], storage->NewDirectReadableFile(path));
    } else {
      SP_ASSIGN_OR_RETURN(open[file], storage->NewReadableFile(path));
    }
    return open[file].get();
  }
};

DataFiles::DataFiles(Storage* storage, std::string dir, const Manifest* m,
                     const std::vector<internal_dcp::StridedView>* views, bool direct)
    : impl_(new Impl{storage, std::move(dir), m, views, direct, {}, {}}) {
  impl_->open.resize(m->files.size());
}
DataFiles::~DataFiles() = default;

Result<const ReadableFile*> DataFiles::Get(uint32_t file) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->Open(file);
}

namespace {

std::string Range(uint64_t offset, uint64_t n) {
  return "bytes [" + std::to_string(offset) + ", " + std::to_string(offset + n) + ")";
}

std::string ChunkName(const Manifest& m, int64_t tensor, int64_t chunk) {
  const TensorRecord& t = m.tensors[tensor];
  return "tensor '" + t.key + "' chunk " + std::to_string(chunk) + " " +
         t.chunks[chunk].box.ToString() + " in '" + m.files[t.chunks[chunk].file] + "'";
}

Status ChecksumMismatch(const std::string& what, uint64_t offset, uint64_t n, uint64_t want,
                        uint64_t got) {
  std::ostringstream os;
  os << what << ": checksum mismatch at " << Range(offset, n) << " (stored " << std::hex << want
     << ", computed " << got << ")";
  return DataLossError(os.str());
}

// The stored checksum of block k of chunk c (blocks of `block` bytes).
uint64_t BlockSum(const ChunkRecord& c, uint64_t k) {
  return c.block_sums.empty() ? c.checksum : c.block_sums[k];
}

// Verifies the whole blocks of chunk c in chunk-relative bytes [a, b) held
// at `mem` (a and b on block boundaries, or b the chunk's end).
Status VerifyBlocks(const Manifest& m, int64_t tensor, int64_t chunk, uint64_t a, uint64_t b,
                    const char* mem) {
  const ChunkRecord& c = m.tensors[tensor].chunks[chunk];
  const uint64_t block = VerifyBlock(m, c);
  for (uint64_t at = a; at < b; at += block) {
    const uint64_t n = std::min(block, b - at);
    const uint64_t got = Checksum64(mem + (at - a), n);
    const uint64_t want = BlockSum(c, at / block);
    if (got != want)
      return ChecksumMismatch(ChunkName(m, tensor, chunk), c.offset + at, n, want, got);
  }
  return OkStatus();
}

// A piece with its run pattern, for scattering; or a part of another rank's
// piece (cooperative load), packed into `packed` instead of a destination.
struct PieceRuns {
  const ReadPiece* p;
  RunPattern runs;
  uint64_t run_bytes;
  bool contiguous;  // one run, same dtype, contiguous destination: can take reads in place
  uint64_t begin;   // chunk-relative byte where its first run starts
  // Only chunk-relative bytes [lo, hi) are placed.
  uint64_t lo = 0, hi = UINT64_MAX;
  char* packed = nullptr;  // a part: flat element f goes to packed[f - flat_base]
  int64_t flat_base = 0;
  // p->dst is row-major contiguous: flat elements [f, f + n) are one range of
  // its memory, so a converted run needs no scratch buffer.
  bool dst_contiguous = false;
};

// Calls fn(from, to, flat) for each run of `pr` inside chunk-relative bytes
// [a, b) (clipped to [pr.lo, pr.hi)): bytes [from, to) of the chunk are
// elements [flat, ...) of the piece.
template <typename Fn>
void ForRunsIn(const Manifest& m, const PieceRuns& pr, uint64_t a, uint64_t b, Fn fn) {
  a = std::max(a, pr.lo);
  b = std::min(b, pr.hi);
  if (a >= b) return;
  const ReadPiece& p = *pr.p;
  const Shape& cs = m.tensors[p.tensor].chunks[p.chunk].box.shape;
  const uint64_t es = DTypeSize(p.src_dtype);
  auto start = [&](int64_t i) {
    return static_cast<uint64_t>(RunStart(cs, p.in_chunk, pr.runs, i)) * es;
  };
  // The first run that ends after a.
  int64_t lo = 0, hi = pr.runs.runs;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (start(mid) + pr.run_bytes <= a) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  for (int64_t i = lo; i < pr.runs.runs; ++i) {
    const uint64_t s = start(i);
    if (s >= b) break;
    const uint64_t from = std::max(s, a), to = std::min(s + pr.run_bytes, b);
    fn(from, to, i * pr.runs.run_elements + static_cast<int64_t>((from - s) / es));
  }
}

// Places the bytes of chunk-relative range [a, b), held at `mem`, that `pr`
// needs. a and b are multiples of the element size.
void Scatter(const Manifest& m, const PieceRuns& pr, uint64_t a, uint64_t b, const char* mem,
             RawBuffer* scratch) {
  const ReadPiece& p = *pr.p;
  const uint64_t es = DTypeSize(p.src_dtype);
  ForRunsIn(m, pr, a, b, [&](uint64_t from, uint64_t to, int64_t flat) {
    const int64_t count = static_cast<int64_t>((to - from) / es);
    const char* src = mem + (from - a);
    if (pr.packed) {
      std::memcpy(pr.packed + (flat - pr.flat_base) * es, src, to - from);
      return;
    }
    if (p.src_dtype != p.dst_dtype && pr.dst_contiguous) {  // converted straight into place
      ConvertElements(p.src_dtype, src, p.dst_dtype,
                      p.dst.data + flat * static_cast<int64_t>(p.dst.elem_size), count);
      return;
    }
    if (p.src_dtype != p.dst_dtype) {
      char* conv = scratch->Resize(count * DTypeSize(p.dst_dtype));
      ConvertElements(p.src_dtype, src, p.dst_dtype, conv, count);
      src = conv;
    }
    ScatterFlatRange(p.dst, flat, flat + count, src);
  });
}

using Ranges = std::vector<std::pair<uint64_t, uint64_t>>;

// Needed chunk-relative byte ranges of the pieces of one chunk, sorted and
// merged where adjacent or overlapping.
Ranges NeededRanges(const Manifest& m, const std::vector<PieceRuns>& prs) {
  Ranges out;
  for (const PieceRuns& pr : prs) {
    ForRunsIn(m, pr, 0, UINT64_MAX, [&](uint64_t from, uint64_t to, int64_t) {
      if (!out.empty() && out.back().second == from) {
        out.back().second = to;
      } else {
        out.push_back({from, to});
      }
    });
  }
  std::sort(out.begin(), out.end());
  std::vector<std::pair<uint64_t, uint64_t>> merged;
  for (const auto& r : out) {
    if (!merged.empty() && r.first <= merged.back().second) {
      merged.back().second = std::max(merged.back().second, r.second);
    } else {
      merged.push_back(r);
    }
  }
  return merged;
}

// Staging for a direct file (O_DIRECT): the request widened to 4096-aligned
// bounds (the end clamped to the file's size) is read at once into aligned
// memory, so the kernel reads straight into it, with no bounce copy of an
// unaligned head or tail and one read call. One buffer per I/O thread.
class DirectStaging {
 public:
  explicit DirectStaging(const ReadableFile* file) : file_(file) {}
  ~DirectStaging() { internal_io::Shelve(std::move(buf_)); }
  DirectStaging(const DirectStaging&) = delete;
  DirectStaging& operator=(const DirectStaging&) = delete;
  // Aligned bounds around file bytes [at, at + n).
  Result<std::pair<uint64_t, uint64_t>> Bounds(uint64_t at, uint64_t n) {
    constexpr uint64_t kA = kDirectIoAlignment;
    const uint64_t lo = at / kA * kA, end = at + n;
    uint64_t hi = (end + kA - 1) / kA * kA;
    if (hi > end) {
      if (size_ == UINT64_MAX) {
        SP_ASSIGN_OR_RETURN(size_, file_->Size());
      }
      hi = std::max(end, std::min(hi, size_));
    }
    return std::make_pair(lo, hi);
  }
  // At least 2 MiB: a RawBuffer of that size is one aligned huge page, which
  // an O_DIRECT read pins as one piece instead of 512 (a fifth of a direct
  // load's CPU went to pinning 4 KiB pages in this VM). Taken from the
  // shelf of buffers that earlier tasks and loads touched already.
  char* Memory(uint64_t n) {
    if (buf_.capacity() == 0) buf_ = internal_io::TakeShelved();
    if (buf_.capacity() < n) buf_.Resize(std::max<uint64_t>(n, internal_io::kHugePageSize));
    return buf_.data();
  }

 private:
  const ReadableFile* file_;
  uint64_t size_ = UINT64_MAX;
  RawBuffer buf_;
};

Status RunTask(const Manifest& m, const ReadTask& t,
               const std::map<std::pair<int64_t, int64_t>, size_t>& group_of,
               const std::vector<std::vector<PieceRuns>>& groups, DataFiles* files,
               const ReadOptions& options, ReadStats* stats) {
  SP_ASSIGN_OR_RETURN(const ReadableFile* file, files->Get(t.file));
  thread_local RawBuffer staging, scratch;
  const bool direct = file->direct();
  DirectStaging direct_staging(file);
  const ReadSegment& s0 = t.segs[0];
  const std::vector<PieceRuns>& g0 = groups[group_of.at({s0.tensor, s0.chunk})];
  // A single contiguous destination that takes the whole request in place
  // (for a direct file, only memory aligned as the file's bytes are: else
  // the aligned staging takes it, which is the one copy either way).
  const PieceRuns* in_place = nullptr;
  if (t.segs.size() == 1 && s0.file_at == t.begin) {
    for (const PieceRuns& pr : g0) {
      if (pr.contiguous && pr.begin <= s0.a && s0.b <= pr.begin + pr.p->nbytes) in_place = &pr;
    }
    if (in_place && direct) {
      const char* dst = in_place->p->dst.data + (s0.a - in_place->begin);
      if ((reinterpret_cast<uintptr_t>(dst) - t.begin) % kDirectIoAlignment != 0) {
        in_place = nullptr;
      }
    }
  }
  auto scatter = [&](const ReadSegment& seg, uint64_t a, uint64_t b, const char* mem) {
    for (const PieceRuns& pr : groups[group_of.at({seg.tensor, seg.chunk})]) {
      if (&pr != in_place) Scatter(m, pr, a, b, mem, &scratch);
    }
  };
  auto read = [&](uint64_t at, uint64_t n, char* dst) {
    stats->requests.fetch_add(1);
    stats->bytes.fetch_add(n);
    Status s = file->ReadAt(at, n, dst);
    return s.ok() ? s : s.WithContext(ChunkName(m, s0.tensor, s0.chunk));
  };
  // Reads file bytes [at, at + n) of chunk-relative bytes [a, ...) into
  // their destination or staging, or finds them where they lie in memory
  // (a MemoryView file: no copy into staging); *mem: where byte `at` is.
  const auto* view = dynamic_cast<const internal_io::MemoryView*>(file);
  auto fetch = [&](uint64_t at, uint64_t a, uint64_t n, const char** mem) -> Status {
    if (in_place) {
      char* dst = in_place->p->dst.data + (a - in_place->begin);
      *mem = dst;
      return read(at, n, dst);
    }
    if (const char* p = view ? view->View(at, n) : nullptr) {
      stats->requests.fetch_add(1);
      stats->bytes.fetch_add(n);
      *mem = p;
      return OkStatus();
    }
    if (!direct) {
      char* buf = staging.Resize(n);
      *mem = buf;
      return read(at, n, buf);
    }
    SP_ASSIGN_OR_RETURN(const auto bounds, direct_staging.Bounds(at, n));
    const auto [lo, hi] = bounds;
    char* buf = direct_staging.Memory(hi - lo);
    *mem = buf + (at - lo);
    return read(lo, hi - lo, buf);
  };

  if (t.stream) {
    // One block larger than a slice: read in slices, hashed as a stream.
    const uint64_t slice = std::max<uint64_t>(8, options.read_slice_bytes / 8 * 8);
    const ChunkRecord& c = m.tensors[s0.tensor].chunks[s0.chunk];
    ChecksumState sum;
    for (uint64_t a = s0.a; a < s0.b;) {
      const uint64_t n = std::min(slice, s0.b - a);
      const char* mem = nullptr;
      SP_RETURN_IF_ERROR(fetch(c.offset + a, a, n, &mem));
      if (options.verify_checksums) sum.Update(mem, n);
      scatter(s0, a, a + n, mem);
      a += n;
    }
    if (options.verify_checksums) {
      const uint64_t block = VerifyBlock(m, c);
      const uint64_t want = BlockSum(c, s0.a / block);
      if (sum.Digest() != want) {
        return ChecksumMismatch(ChunkName(m, s0.tensor, s0.chunk), c.offset + s0.a, s0.b - s0.a,
                                want, sum.Digest());
      }
    }
    return OkStatus();
  }
  const char* mem = nullptr;
  SP_RETURN_IF_ERROR(fetch(t.begin, s0.a, t.end - t.begin, &mem));
  for (const ReadSegment& seg : t.segs) {
    const char* at = mem + (seg.file_at - t.begin);
    if (options.verify_checksums) {
      SP_RETURN_IF_ERROR(VerifyBlocks(m, seg.tensor, seg.chunk, seg.a, seg.b, at));
    }
    scatter(seg, seg.a, seg.b, at);
  }
  return OkStatus();
}

// Consecutive tasks of one file within `prefetch_bytes` of the first one's
// start, announced together: one Prefetch per run of adjacent tasks (bytes
// between tasks are not announced). None when prefetch_bytes is 0.
struct Window {
  size_t first;                                     // its first task
  std::vector<std::pair<uint64_t, uint64_t>> runs;  // absolute [begin, end), at most prefetch_bytes
};
std::vector<Window> PrefetchWindows(const std::vector<ReadTask>& tasks, uint64_t prefetch_bytes) {
  std::vector<Window> out;
  if (prefetch_bytes == 0) return out;
  for (size_t i = 0; i < tasks.size(); ++i) {
    const ReadTask& t = tasks[i];
    const ReadTask* open = out.empty() ? nullptr : &tasks[out.back().first];
    if (!open || open->file != t.file || t.end - open->begin > prefetch_bytes) {
      out.push_back({i, {}});
    }
    auto& runs = out.back().runs;
    if (!runs.empty() && runs.back().second == t.begin) {
      runs.back().second = t.end;
    } else {
      runs.push_back({t.begin, t.end});
    }
  }
  // A single task longer than the window (a block read as a stream):
  // announce its first window only.
  for (Window& w : out) {
    for (auto& r : w.runs) r.second = std::min(r.second, r.first + prefetch_bytes);
  }
  return out;
}

// The pieces (and parts) of each chunk.
struct Groups {
  std::map<std::pair<int64_t, int64_t>, size_t> group_of;
  std::vector<std::vector<PieceRuns>> groups;

  PieceRuns* Add(const Manifest& m, const ReadPiece& p) {
    if (p.nbytes == 0) return nullptr;
    auto [it, fresh] = group_of.try_emplace({p.tensor, p.chunk}, groups.size());
    if (fresh) groups.emplace_back();
    const ChunkRecord& c = m.tensors[p.tensor].chunks[p.chunk];
    PieceRuns pr{&p, RunsOf(c.box.shape, p.in_chunk), 0, false, 0};
    const uint64_t es = DTypeSize(p.src_dtype);
    pr.run_bytes = static_cast<uint64_t>(pr.runs.run_elements) * es;
    pr.begin = static_cast<uint64_t>(RunStart(c.box.shape, p.in_chunk, pr.runs, 0)) * es;
    pr.dst_contiguous = p.dst.data != nullptr && p.dst.IsContiguous();
    pr.contiguous = pr.runs.runs == 1 && p.src_dtype == p.dst_dtype && pr.dst_contiguous;
    groups[it->second].push_back(pr);
    return &groups[it->second].back();
  }
};

// What the read planner needs of each group: its needed ranges.
std::vector<ChunkReads> ChunkReadsOf(const Manifest& m, const Groups& g) {
  std::vector<ChunkReads> out;
  out.reserve(g.groups.size());
  for (const std::vector<PieceRuns>& prs : g.groups) {
    ChunkReads cr{prs[0].p->tensor, prs[0].p->chunk, NeededRanges(m, prs), 0};
    for (const PieceRuns& pr : prs) cr.piece_bytes += pr.p->nbytes;
    out.push_back(std::move(cr));
  }
  return out;
}

ReadTaskOptions TaskOptions(const ReadOptions& o) {
  return ReadTaskOptions{o.verify_checksums, o.read_slice_bytes, o.read_gap_bytes,
                         o.max_gap_fraction, o.unbridged_files};
}

Status Execute(const Manifest& m, const Groups& g, const std::vector<Ranges>* spans,
               DataFiles* files, ThreadPool* pool, const ReadOptions& options, ReadStats* stats) {
  uint64_t needed = 0;
  const std::vector<ReadTask> tasks =
      BuildReadTasks(m, ChunkReadsOf(m, g), spans, TaskOptions(options), &needed);
  stats->needed.fetch_add(needed);
  const std::vector<Window> windows = PrefetchWindows(tasks, options.prefetch_bytes);
  std::vector<size_t> window_of(windows.empty() ? 0 : tasks.size());
  for (size_t w = 0; w < windows.size(); ++w) {
    const size_t end = w + 1 < windows.size() ? windows[w + 1].first : tasks.size();
    for (size_t i = windows[w].first; i < end; ++i) window_of[i] = w;
  }
  // Window w's hints: 0 not given, 1 being given, 2 given. The first task to
  // reach a window gives them without a lock (a hint may wait for the device
  // queue); a task waits only for its own window's, so that its read follows
  // them, and starts the next window's without waiting.
  std::unique_ptr<std::atomic<int>[]> state(new std::atomic<int>[windows.size()]);
  for (size_t w = 0; w < windows.size(); ++w) state[w] = 0;
  auto announce = [&](size_t w, bool wait) {
    if (w >= windows.size()) return;
    int s = 0;
    if (state[w].compare_exchange_strong(s, 1)) {
      try {  // a hint that throws (a Storage of the user's) is only a lost hint
        Result<const ReadableFile*> f = files->Get(tasks[windows[w].first].file);
        if (f.ok()) {  // else the reads will say so
          for (const auto& [begin, end] : windows[w].runs) (*f)->Prefetch(begin, end - begin);
        }
      } catch (...) {
      }
      state[w] = 2;  // also after a throw: tasks of the window wait for this
      state[w].notify_all();
      return;
    }
    for (; wait && s != 2; s = state[w].load()) state[w].wait(s);
  };
  return ParallelFor(pool, static_cast<int64_t>(tasks.size()), [&](int64_t i) {
    if (!windows.empty()) {
      announce(window_of[i], true);
      announce(window_of[i] + 1, false);
    }
    return RunTask(m, tasks[i], g.group_of, g.groups, files, options, stats);
  });
}

}  // namespace

Status ExecuteLoadPlan(const Manifest& m, const LoadPlan& plan, DataFiles* files, ThreadPool* pool,
                       const ReadOptions& options, ReadStats* stats) {
  Groups g;
  for (const ReadPiece& p : plan.pieces) g.Add(m, p);
  return Execute(m, g, nullptr, files, pool, options, stats);
}

Status ExecuteSpans(const Manifest& m, const std::vector<const ReadPiece*>& own,
                    const std::vector<PiecePart>& parts, const std::vector<ChunkSpan>& spans,
                    DataFiles* files, ThreadPool* pool, const ReadOptions& options,
                    ReadStats* stats) {
  Groups g;
  for (const ReadPiece* p : own) g.Add(m, *p);
  for (const PiecePart& part : parts) {
    PieceRuns* pr = g.Add(m, part.piece);
    if (!pr) continue;
    pr->contiguous = false;
    pr->lo = part.a;
    pr->hi = part.b;
    pr->packed = part.out;
    pr->flat_base = part.flat_base;
  }
  std::vector<Ranges> by_group(g.groups.size());
  for (const ChunkSpan& s : spans) {
    auto it = g.group_of.find({s.tensor, s.chunk});
    if (it != g.group_of.end()) by_group[it->second].push_back({s.a, s.b});
  }
  for (Ranges& r : by_group) {
    std::sort(r.begin(), r.end());
    Ranges merged;
    for (const auto& x : r) {
      if (!merged.empty() && merged.back().second >= x.first) {
        merged.back().second = std::max(merged.back().second, x.second);
      } else {
        merged.push_back(x);
      }
    }
    r = std::move(merged);
  }
  return Execute(m, g, &by_group, files, pool, options, stats);
}

Status ReadVerified(DataFiles* files, const Manifest& m, uint32_t file, uint64_t offset,
                    uint64_t nbytes, uint64_t checksum, const std::string& what, char* dst) {
  SP_ASSIGN_OR_RETURN(const ReadableFile* f, files->Get(file));
  Status s = f->ReadAt(offset, nbytes, dst);
  if (!s.ok()) return s.WithContext(what);
  uint64_t got = Checksum64(dst, nbytes);
  if (got != checksum) {
    return ChecksumMismatch(what + " in '" + m.files[file] + "'", offset, nbytes, checksum, got);
  }
  return OkStatus();
}

Status CheckStored(DataFiles* files, const Manifest& m, uint32_t file, uint64_t offset,
                   uint64_t nbytes, uint64_t checksum, const std::vector<uint64_t>& block_sums,
                   const std::string& what, size_t slice_bytes, uint64_t prefetch_bytes,
                   const std::function<void(uint64_t)>& on_slice) {
  SP_ASSIGN_OR_RETURN(const ReadableFile* f, files->Get(file));
  const std::string where = what + " in '" + m.files[file] + "'";
  const uint64_t block = block_sums.empty() ? 0 : m.block_size;
  const uint64_t slice = std::max<uint64_t>(1, std::min<uint64_t>(nbytes, slice_bytes));
  std::unique_ptr<char[]> buf(new char[slice]);
  ChecksumState sum, block_sum;
  // Windows of prefetch_bytes, each announced when a read enters the one
  // before it (the first two up front).
  uint64_t announced = 0;  // windows
  for (uint64_t done = 0; done < nbytes;) {
    const uint64_t n = std::min(slice, nbytes - done);
    for (; prefetch_bytes && announced <= done / prefetch_bytes + 1 &&
           announced * prefetch_bytes < nbytes;
         ++announced) {
      const uint64_t at = announced * prefetch_bytes;
      try {  // a hint that throws (a Storage of the user's) is only a lost hint
        f->Prefetch(offset + at, std::min(prefetch_bytes, nbytes - at));
      } catch (...) {
      }
    }
    Status s = f->ReadAt(offset + done, n, buf.get());
    if (!s.ok()) return s.WithContext(what);
    sum.Update(buf.get(), n);
    // Block checksums, streamed across slices.
    for (uint64_t at = 0; block && at < n;) {
      const uint64_t pos = done + at;
      const uint64_t end = std::min(nbytes, (pos / block + 1) * block);
      const uint64_t k = std::min(n - at, end - pos);
      block_sum.Update(buf.get() + at, k);
      at += k;
      if (pos + k < end) continue;
      const uint64_t start = end - std::min(end, (end - 1) % block + 1);
      const uint64_t want = block_sums[start / block];
      if (block_sum.Digest() != want) {
        return ChecksumMismatch(where, offset + start, end - start, want, block_sum.Digest());
      }
      block_sum.Reset();
    }
    done += n;
    if (on_slice) on_slice(n);
  }
  if (sum.Digest() != checksum) {
    return ChecksumMismatch(where, offset, nbytes, checksum, sum.Digest());
  }
  return OkStatus();
}

}  // namespace shardpoint::internal_checkpoint
