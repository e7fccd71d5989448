// Content-MD5 throughput: OpenSSL's MD5 against the shared 8-lane hasher
// (src/objstore/md5_shared.h) with T threads each hashing its own 16 MiB
// parts at once, as T part uploads in flight do. Bytes/s are all threads'
// bytes; UseRealTime, so the figure is the aggregate wall-clock rate.
//
// Needs Google Benchmark (benchmark::benchmark); it has its own main.
#include <benchmark/benchmark.h>
#include <openssl/evp.h>

#include <string>

#include "src/objstore/md5_shared.h"

namespace shardpoint::internal_objstore {
namespace {

constexpr size_t kPart = size_t{16} << 20;

const std::string& Part(int thread) {
  static std::string parts[64];
  std::string& p = parts[thread % 64];
  if (p.empty()) {
    p.resize(kPart);
    for (size_t i = 0; i < kPart; ++i) p[i] = static_cast<char>(i * 131 + thread);
  }
  return p;
}

void BM_OpenSslMd5(benchmark::State& state) {
  const std::string& p = Part(state.thread_index());
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  for (auto _ : state) {
    EVP_Digest(p.data(), p.size(), out, &n, EVP_md5(), nullptr);
    benchmark::DoNotOptimize(out);
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(kPart));
}
BENCHMARK(BM_OpenSslMd5)->ThreadRange(1, 16)->UseRealTime();

void BM_SharedMd5(benchmark::State& state) {
  const std::string& p = Part(state.thread_index());
  unsigned char out[16];
  for (auto _ : state) {
    SharedMd5(p.data(), p.size(), out);
    benchmark::DoNotOptimize(out);
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(kPart));
}
BENCHMARK(BM_SharedMd5)->ThreadRange(1, 16)->UseRealTime();

}  // namespace
}  // namespace shardpoint::internal_objstore

BENCHMARK_MAIN();
