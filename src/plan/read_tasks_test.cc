#include "src/plan/read_tasks.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <string>

using shardpoint::internal_format::ChunkRecord;
using shardpoint::internal_format::Manifest;
using shardpoint::internal_format::NumBlocks;
using shardpoint::internal_format::TensorRecord;
using shardpoint::internal_format::VerifyBlock;

namespace shardpoint::internal_plan {
namespace {

// A random plan's input: chunks of F32 tensors laid out in 1 to 3 files with
// random gaps between them, some verified by blocks, some whole; random
// needed ranges (whole elements) in a random subset of the chunks; random
// knobs, small so that every rule (slices, streamed blocks, gaps bridged in
// one unit or by budget, unbridged files) is met.
struct Input {
  Manifest m;
  std::vector<ChunkReads> chunks;
  std::vector<ByteRanges> spans;  // used where `with_spans`
  bool with_spans = false;
  std::vector<bool> unbridged;
  ReadTaskOptions options;
};

// Sorted, disjoint ranges in [0, n) at multiples of `grain` (1 to 4 of them).
ByteRanges RandomRanges(std::mt19937_64& rng, uint64_t n, uint64_t grain) {
  std::vector<uint64_t> cuts;
  const int k = 2 * (1 + static_cast<int>(rng() % 4));
  for (int i = 0; i < k; ++i) cuts.push_back(std::min(n, rng() % (n / grain + 1) * grain));
  std::sort(cuts.begin(), cuts.end());
  ByteRanges out;
  for (int i = 0; i + 1 < k; i += 2) {
    if (cuts[i] < cuts[i + 1]) out.push_back({cuts[i], cuts[i + 1]});
  }
  if (out.empty()) out.push_back({0, std::min(n, grain)});
  ByteRanges merged;  // touching ranges merged, as NeededRanges does
  for (const auto& r : out) {
    if (!merged.empty() && merged.back().second >= r.first) {
      merged.back().second = std::max(merged.back().second, r.second);
    } else {
      merged.push_back(r);
    }
  }
  return merged;
}

Input RandomInput(uint64_t seed) {
  std::mt19937_64 rng(seed);
  Input in;
  ReadTaskOptions& o = in.options;
  o.verify_checksums = rng() % 2 == 0;
  o.read_slice_bytes = std::vector<uint64_t>{8, 60, 64, 100, 256, 1000}[rng() % 6];
  o.read_gap_bytes = std::vector<uint64_t>{0, 8, 40, 300}[rng() % 4];
  o.max_gap_fraction = std::vector<double>{0, 0.05, 0.5, 10}[rng() % 4];
  in.m.block_size = std::vector<uint64_t>{16, 64, 128, 512}[rng() % 4];
  const int files = 1 + static_cast<int>(rng() % 3);
  for (int f = 0; f < files; ++f) {
    in.m.files.push_back("data/" + std::to_string(f) + ".safetensors");
    in.unbridged.push_back(rng() % 4 == 0);
  }
  o.unbridged_files = rng() % 2 ? &in.unbridged : nullptr;
  std::vector<uint64_t> end(files, 64);
  const int tensors = 1 + static_cast<int>(rng() % 4);
  for (int t = 0; t < tensors; ++t) {
    TensorRecord tr{"t" + std::to_string(t), DType::kF32, {}, {}};
    const int chunks = 1 + static_cast<int>(rng() % 3);
    for (int c = 0; c < chunks; ++c) {
      const int64_t elems = 1 + static_cast<int64_t>(rng() % 300);
      ChunkRecord cr{Box({c}, {elems}),
                     static_cast<uint32_t>(rng() % files),
                     0,
                     static_cast<uint64_t>(elems) * 4,
                     0,
                     {}};
      end[cr.file] += rng() % 3 == 0 ? 0 : 4 * (rng() % 100);  // a gap before it, or none
      cr.offset = end[cr.file];
      end[cr.file] += cr.nbytes;
      if (rng() % 3 != 0) cr.block_sums.assign(NumBlocks(cr.nbytes, in.m.block_size), 0);
      tr.chunks.push_back(std::move(cr));
    }
    in.m.tensors.push_back(std::move(tr));
  }
  in.with_spans = rng() % 3 == 0;
  for (int64_t t = 0; t < tensors; ++t) {
    for (int64_t c = 0; c < static_cast<int64_t>(in.m.tensors[t].chunks.size()); ++c) {
      if (rng() % 4 == 0) continue;
      const ChunkRecord& cr = in.m.tensors[t].chunks[c];
      ChunkReads r{t, c, RandomRanges(rng, cr.nbytes, 4), 0};
      for (const auto& [a, b] : r.needed) r.piece_bytes += b - a;
      in.chunks.push_back(std::move(r));
      // Spans lie on the verification block grid when verifying.
      const uint64_t grain = o.verify_checksums ? VerifyBlock(in.m, cr) : 4;
      in.spans.push_back(RandomRanges(rng, cr.nbytes, grain));
    }
  }
  return in;
}

// Every property a reader relies on, for one input; the first failure, or "".
std::string Check(const Input& in) {
  const Manifest& m = in.m;
  const ReadTaskOptions& o = in.options;
  uint64_t needed = 0;
  const std::vector<ReadTask> tasks =
      BuildReadTasks(m, in.chunks, in.with_spans ? &in.spans : nullptr, o, &needed);
  const uint64_t slice = std::max<uint64_t>(8, o.read_slice_bytes / 8 * 8);
  std::map<std::pair<int64_t, int64_t>, ByteRanges> read;  // segments, per chunk
  double budget_used = 0;
  for (const ReadTask& t : tasks) {
    if (t.segs.empty() || t.begin >= t.end) return "an empty task";
    if (t.stream) {
      const ReadSegment& s = t.segs[0];
      const ChunkRecord& c = m.tensors[s.tensor].chunks[s.chunk];
      const uint64_t block = VerifyBlock(m, c);
      if (t.segs.size() != 1 || !o.verify_checksums || block <= slice || s.a % block != 0 ||
          s.b != std::min(c.nbytes, s.a + block)) {
        return "a streamed task is not one block larger than a slice";
      }
    } else if (t.end - t.begin > slice) {
      return "a request of " + std::to_string(t.end - t.begin) + " bytes, over the slice of " +
             std::to_string(slice);
    }
    for (size_t i = 0; i < t.segs.size(); ++i) {
      const ReadSegment& s = t.segs[i];
      const ChunkRecord& c = m.tensors[s.tensor].chunks[s.chunk];
      if (c.file != t.file || s.a >= s.b || s.b > c.nbytes || s.file_at != c.offset + s.a) {
        return "a segment outside its chunk or file";
      }
      const uint64_t prev_end =
          i == 0 ? t.begin : t.segs[i - 1].file_at + (t.segs[i - 1].b - t.segs[i - 1].a);
      if (s.file_at < prev_end) return "segments of a task overlap or are out of order";
      const uint64_t gap = s.file_at - prev_end;
      if (gap > 0) {
        const ReadSegment& p = t.segs[i - 1];
        if (gap > o.read_gap_bytes) return "a bridged gap over read_gap_bytes";
        if (o.unbridged_files && (*o.unbridged_files)[t.file]) return "a gap bridged in a view";
        const bool one_unit =
            p.tensor == s.tensor && p.chunk == s.chunk && (p.b - 1) / slice == s.a / slice;
        if (!one_unit) budget_used += static_cast<double>(gap);
      }
      if (o.verify_checksums) {
        const uint64_t block = VerifyBlock(m, c);
        if (s.a % block != 0 || (s.b % block != 0 && s.b != c.nbytes)) {
          return "a verified segment that is not whole blocks";
        }
      }
      read[{s.tensor, s.chunk}].push_back({s.a, s.b});
    }
    const ReadSegment& last = t.segs.back();
    if (t.segs[0].file_at != t.begin || last.file_at + (last.b - last.a) != t.end) {
      return "a task's bytes are not its segments'";
    }
  }
  if (budget_used > o.max_gap_fraction * static_cast<double>(needed) + 1e-9) {
    return "bridged gaps of " + std::to_string(budget_used) + " bytes, over the budget";
  }
  // Every needed byte in exactly one segment: segments disjoint, covering.
  uint64_t want_needed = 0, read_bytes = 0;
  for (auto& [key, segs] : read) {
    std::sort(segs.begin(), segs.end());
    for (size_t i = 1; i < segs.size(); ++i) {
      if (segs[i].first < segs[i - 1].second) return "a byte read by two segments";
    }
    for (const auto& [a, b] : segs) read_bytes += b - a;
    ByteRanges merged;  // adjacent segments as one range, to compare with
    for (const auto& r : segs) {
      if (!merged.empty() && merged.back().second == r.first) {
        merged.back().second = r.second;
      } else {
        merged.push_back(r);
      }
    }
    segs = std::move(merged);
  }
  for (size_t ci = 0; ci < in.chunks.size(); ++ci) {
    const ChunkReads& cr = in.chunks[ci];
    const ByteRanges want = in.with_spans ? IntersectRanges(cr.needed, in.spans[ci]) : cr.needed;
    ByteRanges& segs = read[{cr.tensor, cr.chunk}];
    want_needed += in.with_spans ? 0 : cr.piece_bytes;
    for (const auto& [a, b] : want) {
      if (in.with_spans) want_needed += b - a;
      if (IntersectRanges({{a, b}}, segs) != ByteRanges{{a, b}}) {
        return "needed bytes [" + std::to_string(a) + ", " + std::to_string(b) + ") of chunk " +
               std::to_string(cr.chunk) + " of tensor " + std::to_string(cr.tensor) + " unread";
      }
    }
  }
  if (needed != want_needed)
    return "needed " + std::to_string(needed) + " bytes, not " + std::to_string(want_needed);
  if (!o.verify_checksums && !in.with_spans && read_bytes != needed) {
    return "an unverified read of bytes no piece needs";
  }
  return "";
}

TEST(ReadTasksTest, EveryNeededByteInExactlyOneTaskWithinTheBudgets) {
  int streamed = 0, bridged = 0;
  for (uint64_t seed = 1; seed <= 400; ++seed) {
    const Input in = RandomInput(seed);
    ASSERT_EQ(Check(in), "") << "seed " << seed;
    uint64_t needed = 0;
    for (const ReadTask& t : BuildReadTasks(in.m, in.chunks, in.with_spans ? &in.spans : nullptr,
                                            in.options, &needed)) {
      streamed += t.stream;
      for (size_t i = 1; i < t.segs.size(); ++i) {
        bridged += t.segs[i].file_at > t.segs[i - 1].file_at + (t.segs[i - 1].b - t.segs[i - 1].a);
      }
    }
  }
  // The inputs reach the rules they check.
  EXPECT_GT(streamed, 0);
  EXPECT_GT(bridged, 0);
}

TEST(ReadTasksTest, AGapIsBridgedWithinOneSliceUnitOrTheBudget) {
  // One chunk of 1000 bytes at 4096, requests of at most 64 bytes.
  Manifest m;
  m.files = {"f"};
  m.tensors.push_back(TensorRecord{"t", DType::kF32, {250}, {}});
  m.tensors[0].chunks.push_back(ChunkRecord{Box({0}, {250}), 0, 4096, 1000, 0, {}});
  ReadTaskOptions o;
  o.verify_checksums = false;
  o.read_slice_bytes = 64;
  o.read_gap_bytes = 100;
  o.max_gap_fraction = 0;
  uint64_t needed = 0;
  // [0, 8) and [40, 48) lie in one 64-byte unit: one request, whatever the budget.
  EXPECT_EQ(BuildReadTasks(m, {{0, 0, {{0, 8}, {40, 48}}, 16}}, nullptr, o, &needed).size(), 1u);
  EXPECT_EQ(needed, 16u);
  // [60, 64) and [68, 72) lie in two units: their 4-byte gap is bridged only
  // within max_gap_fraction of the 8 needed bytes.
  const std::vector<ChunkReads> two_units = {{0, 0, {{60, 64}, {68, 72}}, 8}};
  o.max_gap_fraction = 0.4;
  needed = 0;
  EXPECT_EQ(BuildReadTasks(m, two_units, nullptr, o, &needed).size(), 2u);
  o.max_gap_fraction = 0.5;
  needed = 0;
  const std::vector<ReadTask> t = BuildReadTasks(m, two_units, nullptr, o, &needed);
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0].begin, 4096u + 60);
  EXPECT_EQ(t[0].end, 4096u + 72);
  EXPECT_EQ(t[0].segs.size(), 2u);
}

}  // namespace
}  // namespace shardpoint::internal_plan
