// StridedCopy throughput against plain memcpy, for the shapes a checkpoint
// copies most: whole contiguous shards, column halves of a row-major tensor
// (TP column split), and a transposed view. Reported as bytes/s of copied data.
//
// Needs Google Benchmark (benchmark::benchmark); it has its own main.
#include <benchmark/benchmark.h>

#include <cstring>
#include <vector>

#include "src/geometry/view.h"

namespace shardpoint::internal_geometry {
namespace {

constexpr int64_t kRows = 4096;
constexpr int64_t kCols = 4096;
constexpr size_t kElem = 2;  // bf16

void BM_Memcpy(benchmark::State& state) {
  std::vector<char> src(kRows * kCols * kElem, 1), dst(src.size());
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), src.size());
    benchmark::DoNotOptimize(dst.data());
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(src.size()));
}
BENCHMARK(BM_Memcpy)->UseRealTime();

void BM_StridedCopyContiguous(benchmark::State& state) {
  std::vector<char> src(kRows * kCols * kElem, 1), dst(src.size());
  const View s = ContiguousView(src.data(), kElem, {kRows, kCols});
  const View d = ContiguousView(dst.data(), kElem, {kRows, kCols});
  for (auto _ : state) {
    StridedCopy(d, s);
    benchmark::DoNotOptimize(dst.data());
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(src.size()));
}
BENCHMARK(BM_StridedCopyContiguous)->UseRealTime();

// The right half of every row of a [rows, 2*cols] tensor into a [rows, cols] one.
void BM_StridedCopyHalfRow(benchmark::State& state) {
  std::vector<char> src(kRows * 2 * kCols * kElem, 1), dst(kRows * kCols * kElem);
  const View s =
      ContiguousView(src.data(), kElem, {kRows, 2 * kCols}).Sub(Box({0, kCols}, {kRows, kCols}));
  const View d = ContiguousView(dst.data(), kElem, {kRows, kCols});
  for (auto _ : state) {
    StridedCopy(d, s);
    benchmark::DoNotOptimize(dst.data());
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(dst.size()));
}
BENCHMARK(BM_StridedCopyHalfRow)->UseRealTime();

// A transposed source (column-major read, row-major write); element size 2 or 4.
void BM_StridedCopyTransposed(benchmark::State& state) {
  const size_t elem = static_cast<size_t>(state.range(0));
  const int64_t n = 2048;
  std::vector<char> src(n * n * elem, 1), dst(src.size());
  View s = ContiguousView(src.data(), elem, {n, n});
  std::swap(s.byte_strides[0], s.byte_strides[1]);
  const View d = ContiguousView(dst.data(), elem, {n, n});
  for (auto _ : state) {
    StridedCopy(d, s);
    benchmark::DoNotOptimize(dst.data());
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(dst.size()));
}
BENCHMARK(BM_StridedCopyTransposed)->Arg(2)->Arg(4)->UseRealTime();

}  // namespace
}  // namespace shardpoint::internal_geometry

BENCHMARK_MAIN();
