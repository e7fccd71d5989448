#include "src/plan/span_assignment.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>

using shardpoint::internal_format::ChunkRecord;
using shardpoint::internal_format::Manifest;
using shardpoint::internal_format::TensorRecord;

namespace shardpoint::internal_plan {
namespace {

constexpr uint64_t kEs = 4;  // F32

// A random cooperative load: 2-D F32 tensors saved as row chunks, one after
// another in one file; 1 to 4 ranks, each needing a random box (or none) of
// each chunk, so that blocks are needed by one rank, by several (replicas,
// cuts along the other dim) or by none; a random unit and round size.
struct Input {
  Manifest m;
  std::vector<ChunkNeeds> chunks;
  int ranks = 1;
  uint64_t round_bytes = 0;
};

Box RandomBox(std::mt19937_64& rng, const Shape& shape) {
  Box b(Shape(shape.size(), 0), shape);
  for (size_t d = 0; d < shape.size(); ++d) {
    const int64_t lo = static_cast<int64_t>(rng() % shape[d]);
    b.offset[d] = lo;
    b.shape[d] = 1 + static_cast<int64_t>(rng() % (shape[d] - lo));
  }
  return b;
}

Input RandomInput(uint64_t seed) {
  std::mt19937_64 rng(seed);
  Input in;
  in.ranks = 1 + static_cast<int>(rng() % 4);
  in.round_bytes = std::vector<uint64_t>{1, 64, 256, 4096, uint64_t{1} << 30}[rng() % 5];
  const uint64_t unit = std::vector<uint64_t>{4, 12, 32, 64, 200, kUnverifiedUnit}[rng() % 6];
  in.m.files = {"data/0.safetensors"};
  uint64_t end = 0;
  const int tensors = 1 + static_cast<int>(rng() % 3);
  for (int t = 0; t < tensors; ++t) {
    const Shape shape{1 + static_cast<int64_t>(rng() % 12), 1 + static_cast<int64_t>(rng() % 12)};
    TensorRecord tr{"t" + std::to_string(t), DType::kF32, shape, {}};
    const int64_t cuts = 1 + static_cast<int64_t>(rng() % std::min<int64_t>(3, shape[0]));
    for (int64_t c = 0, row = 0; c < cuts; ++c) {
      const int64_t rows = c + 1 == cuts ? shape[0] - row : 1 + (shape[0] - row - 1) / cuts;
      Box box({row, 0}, {rows, shape[1]});
      const uint64_t nbytes = static_cast<uint64_t>(box.num_elements()) * kEs;
      tr.chunks.push_back(ChunkRecord{box, 0, end, nbytes, 0, {}});
      end += nbytes;
      row += rows;
      ChunkNeeds cn{t, c, unit, kEs, {}};
      for (int r = 0; r < in.ranks; ++r) {
        if (rng() % 3 == 0) continue;
        const Box in_chunk = RandomBox(rng, Box(Shape(2, 0), box.shape).shape);
        cn.needs.push_back(Need{r, static_cast<int64_t>(rng() % 5), in_chunk});
      }
      if (!cn.needs.empty()) in.chunks.push_back(std::move(cn));  // as DecodePlans
    }
    in.m.tensors.push_back(std::move(tr));
  }
  return in;
}

// Per byte of the chunk, the ranks whose box holds it (by brute force).
std::vector<std::vector<int>> Holders(const Manifest& m, const ChunkNeeds& cn) {
  const ChunkRecord& c = m.tensors[cn.tensor].chunks[cn.chunk];
  const int64_t cols = c.box.shape[1];
  std::vector<std::vector<int>> out(c.nbytes);
  for (const Need& need : cn.needs) {
    for (int64_t r = 0; r < need.in_chunk.shape[0]; ++r) {
      for (int64_t k = 0; k < need.in_chunk.shape[1]; ++k) {
        const int64_t e = (need.in_chunk.offset[0] + r) * cols + need.in_chunk.offset[1] + k;
        for (uint64_t b = 0; b < kEs; ++b) out[e * kEs + b].push_back(need.rank);
      }
    }
  }
  return out;
}

// Every property the exchange relies on; the first failure, or "".
std::string Check(const Input& in) {
  const std::vector<Span> spans = AssignSpans(in.m, in.chunks, in.ranks, in.round_bytes);
  const uint64_t cap = std::max<uint64_t>(1, in.round_bytes / 4);
  std::vector<std::vector<int>> reads(in.chunks.size());  // per chunk byte: spans reading it
  for (size_t ci = 0; ci < in.chunks.size(); ++ci) {
    const ChunkNeeds& cn = in.chunks[ci];
    reads[ci].assign(in.m.tensors[cn.tensor].chunks[cn.chunk].nbytes, 0);
  }
  for (const Span& s : spans) {
    if (s.chunk >= in.chunks.size()) return "a span of no chunk";
    const ChunkNeeds& cn = in.chunks[s.chunk];
    const ChunkRecord& c = in.m.tensors[cn.tensor].chunks[cn.chunk];
    const std::vector<std::vector<int>> holders = Holders(in.m, cn);
    if (s.a >= s.b || s.b > c.nbytes || s.a % cn.unit != 0 ||
        (s.b % cn.unit != 0 && s.b != c.nbytes)) {
      return "a span that is not whole units of its chunk";
    }
    if (s.b - s.a > std::max<uint64_t>(1, cap / cn.unit) * cn.unit) return "a span over the cap";
    if (s.reader < 0 || s.reader >= in.ranks) return "a span read by no rank";
    bool reader_needs_chunk = false;
    for (const Need& need : cn.needs) reader_needs_chunk |= need.rank == s.reader;
    if (!reader_needs_chunk) return "a span read by a rank that needs none of its chunk";
    uint64_t send = 0;
    for (uint64_t u = s.a; u < s.b; u += cn.unit) {
      bool needed = false;
      for (uint64_t x = u; x < std::min(s.b, u + cn.unit); ++x) needed |= !holders[x].empty();
      if (!needed) return "a span reads a unit that no rank needs";
    }
    for (uint64_t x = s.a; x < s.b; ++x) {
      ++reads[s.chunk][x];
      for (int r : holders[x]) send += r != s.reader;
    }
    if (s.send != send) {
      return "a span sends " + std::to_string(s.send) + " bytes, not " + std::to_string(send);
    }
  }
  for (size_t ci = 0; ci < in.chunks.size(); ++ci) {
    const std::vector<std::vector<int>> holders = Holders(in.m, in.chunks[ci]);
    for (size_t x = 0; x < holders.size(); ++x) {
      if (!holders[x].empty() && reads[ci][x] != 1) {
        return "byte " + std::to_string(x) + " of chunk " + std::to_string(ci) + " read by " +
               std::to_string(reads[ci][x]) + " ranks";
      }
    }
  }
  return "";
}

TEST(SpanAssignmentTest, EachNeededBlockIsReadByExactlyOneRank) {
  int shared = 0;
  for (uint64_t seed = 1; seed <= 300; ++seed) {
    const Input in = RandomInput(seed);
    ASSERT_EQ(Check(in), "") << "seed " << seed;
    for (const Span& s : AssignSpans(in.m, in.chunks, in.ranks, in.round_bytes)) {
      shared += s.send > 0;
    }
  }
  EXPECT_GT(shared, 0);  // the inputs reach blocks several ranks need
}

TEST(SpanAssignmentTest, ChunksEachNeededByOneRankAreReadByItAndSendNothing) {
  // The saved layout loaded back: rank r needs all of chunk r, alone.
  Manifest m;
  m.files = {"f"};
  TensorRecord t{"w", DType::kF32, {8, 4}, {}};
  std::vector<ChunkNeeds> chunks;
  for (int r = 0; r < 4; ++r) {
    t.chunks.push_back(ChunkRecord{Box({2 * r, 0}, {2, 4}), 0, 32u * r, 32, 0, {}});
    chunks.push_back(ChunkNeeds{0, r, 8, kEs, {Need{r, 0, Box({0, 0}, {2, 4})}}});
  }
  m.tensors.push_back(t);
  const std::vector<Span> spans = AssignSpans(m, chunks, 4, uint64_t{1} << 20);
  ASSERT_EQ(spans.size(), 4u);
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(spans[r].reader, r);
    EXPECT_EQ(spans[r].send, 0u);
    EXPECT_EQ(spans[r].b - spans[r].a, 32u);
  }
}

TEST(SpanAssignmentTest, AReplicatedTensorIsReadAboutOncePerRankShare) {
  // Four ranks need all of one 64 KiB chunk (data-parallel replicas), in
  // 4 KiB blocks: each reads between an eighth and a half of it.
  Manifest m;
  m.files = {"f"};
  TensorRecord t{"w", DType::kF32, {64, 256}, {}};
  t.chunks.push_back(ChunkRecord{Box({0, 0}, {64, 256}), 0, 0, 65536, 0, {}});
  m.tensors.push_back(t);
  ChunkNeeds cn{0, 0, 4096, kEs, {}};
  for (int r = 0; r < 4; ++r) cn.needs.push_back(Need{r, 0, Box({0, 0}, {64, 256})});
  std::vector<uint64_t> read(4, 0);
  for (const Span& s : AssignSpans(m, {cn}, 4, uint64_t{1} << 20)) read[s.reader] += s.b - s.a;
  for (int r = 0; r < 4; ++r) {
    EXPECT_GE(read[r], 65536u / 8) << "rank " << r;
    EXPECT_LE(read[r], 65536u / 2) << "rank " << r;
  }
}

}  // namespace
}  // namespace shardpoint::internal_plan
