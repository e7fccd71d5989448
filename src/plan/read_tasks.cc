#include "src/plan/read_tasks.h"

#include <algorithm>
#include <tuple>

using shardpoint::internal_format::ChunkRecord;
using shardpoint::internal_format::Manifest;
using shardpoint::internal_format::VerifyBlock;

namespace shardpoint::internal_plan {
namespace {

// A range of one chunk to read: absolute file bytes [begin, end).
struct FileRange {
  uint32_t file;
  uint64_t begin, end;
  int64_t tensor, chunk;
  uint64_t block;  // verification block (0: not verifying)
};

// The ranges to read, sorted by file and offset (whole blocks when
// verifying); `needed` gets the needed bytes.
std::vector<FileRange> CoveringRanges(const Manifest& m, const std::vector<ChunkReads>& chunks,
                                      const std::vector<ByteRanges>* spans, bool verify,
                                      uint64_t* needed) {
  std::vector<FileRange> ranges;
  for (size_t ci = 0; ci < chunks.size(); ++ci) {
    const ChunkReads& cr = chunks[ci];
    const ChunkRecord& c = m.tensors[cr.tensor].chunks[cr.chunk];
    const uint64_t block = verify ? VerifyBlock(m, c) : 0;
    ByteRanges want = cr.needed;
    if (spans) {
      want = IntersectRanges(want, (*spans)[ci]);
      for (const auto& [a, b] : want) *needed += b - a;
      if (block) want = (*spans)[ci];
    } else {
      *needed += cr.piece_bytes;
    }
    for (auto [a, b] : want) {
      if (block) {
        a = a / block * block;
        b = std::min(c.nbytes, (b + block - 1) / block * block);
      }
      if (!ranges.empty() && ranges.back().tensor == cr.tensor && ranges.back().chunk == cr.chunk &&
          ranges.back().end >= c.offset + a) {
        ranges.back().end = std::max(ranges.back().end, c.offset + b);
        continue;
      }
      ranges.push_back({c.file, c.offset + a, c.offset + b, cr.tensor, cr.chunk, block});
    }
  }
  std::sort(ranges.begin(), ranges.end(), [](const FileRange& x, const FileRange& y) {
    return std::tie(x.file, x.begin) < std::tie(y.file, y.begin);
  });
  return ranges;
}

// join[i]: range i continues range i-1's request. Bridged: gaps of at most
// read_gap_bytes, smallest first, while the bridged bytes stay within
// max_gap_fraction of the needed ones; and, whatever that budget, those
// inside one slice-sized unit of a chunk: an unverified load cut along
// another dim (strips of every row) then makes a request per unit, as a
// verified one does per block, not one per strip.
std::vector<bool> Joins(const Manifest& m, const std::vector<FileRange>& ranges, uint64_t slice,
                        const ReadTaskOptions& options, uint64_t needed) {
  std::vector<bool> join(ranges.size(), false);
  std::vector<std::pair<uint64_t, size_t>> gaps;
  for (size_t i = 1; i < ranges.size(); ++i) {
    const FileRange& p = ranges[i - 1];
    const FileRange& r = ranges[i];
    if (r.file != p.file || r.begin < p.end) continue;
    const uint64_t gap = r.begin - p.end;
    const bool unbridged = options.unbridged_files && r.file < options.unbridged_files->size() &&
                           (*options.unbridged_files)[r.file];
    if (gap == 0) {
      join[i] = true;
    } else if (gap <= options.read_gap_bytes && !unbridged) {
      const uint64_t at = m.tensors[r.tensor].chunks[r.chunk].offset;
      const bool one_unit = r.tensor == p.tensor && r.chunk == p.chunk &&
                            (p.end - 1 - at) / slice == (r.begin - at) / slice;
      if (one_unit) {
        join[i] = true;
      } else {
        gaps.push_back({gap, i});
      }
    }
  }
  std::sort(gaps.begin(), gaps.end());
  double budget = options.max_gap_fraction * static_cast<double>(needed);
  for (const auto& [gap, i] : gaps) {
    if (static_cast<double>(gap) > budget) break;
    budget -= static_cast<double>(gap);
    join[i] = true;
  }
  return join;
}

// Appends range `r` to `tasks` in requests of at most a slice, cut on the
// chunk's block grid (multiples of 8 bytes when not verifying: whole
// elements of any dtype); a block larger than a slice is a task of its own,
// read in slices as a stream.
void CutRange(const Manifest& m, const FileRange& r, bool join, uint64_t slice,
              std::vector<ReadTask>* tasks) {
  const ChunkRecord& c = m.tensors[r.tensor].chunks[r.chunk];
  if (r.block > slice) {
    for (uint64_t at = r.begin; at < r.end; at += r.block) {
      const uint64_t to = std::min(r.end, at + r.block);
      tasks->push_back(
          ReadTask{r.file, at, to, {{r.tensor, r.chunk, at - c.offset, to - c.offset, at}}, true});
    }
    return;
  }
  const uint64_t unit = r.block ? r.block : 8;
  for (uint64_t at = r.begin; at < r.end;) {
    ReadTask* t = tasks->empty() ? nullptr : &tasks->back();
    const bool joins = t && !t->stream && t->file == r.file && (at > r.begin || join);
    const uint64_t room = joins ? slice - std::min(slice, at - t->begin) : 0;
    uint64_t take = std::min(r.end - at, room / unit * unit);
    if (take == 0 && r.end - at < unit && r.end - at <= room) take = r.end - at;
    if (take == 0) {
      tasks->push_back(ReadTask{r.file, at, at, {}, false});
      t = &tasks->back();
      take = std::min(r.end - at, std::max(unit, slice / unit * unit));
    }
    t->segs.push_back({r.tensor, r.chunk, at - c.offset, at + take - c.offset, at});
    t->end = at + take;
    at += take;
  }
}

}  // namespace

ByteRanges IntersectRanges(const ByteRanges& x, const ByteRanges& y) {
  ByteRanges out;
  for (size_t i = 0, j = 0; i < x.size() && j < y.size();) {
    const uint64_t a = std::max(x[i].first, y[j].first), b = std::min(x[i].second, y[j].second);
    if (a < b) out.push_back({a, b});
    if (x[i].second < y[j].second) {
      ++i;
    } else {
      ++j;
    }
  }
  return out;
}

std::vector<ReadTask> BuildReadTasks(const Manifest& m, const std::vector<ChunkReads>& chunks,
                                     const std::vector<ByteRanges>* spans,
                                     const ReadTaskOptions& options, uint64_t* needed) {
  const std::vector<FileRange> ranges =
      CoveringRanges(m, chunks, spans, options.verify_checksums, needed);
  const uint64_t slice = std::max<uint64_t>(8, options.read_slice_bytes / 8 * 8);
  const std::vector<bool> join = Joins(m, ranges, slice, options, *needed);
  std::vector<ReadTask> tasks;
  for (size_t i = 0; i < ranges.size(); ++i) CutRange(m, ranges[i], join[i], slice, &tasks);
  return tasks;
}

}  // namespace shardpoint::internal_plan
