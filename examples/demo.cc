// The resharding demo: 8 ranks as threads save a transformer-like model with
// Adam state laid out TP=2 x PP=2 x DP=2 (distributed optimizer), then 8 other
// ranks load it as TP=4 x PP=1 x DP=2, and every byte is checked.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <string>

#include "shardpoint/checkpoint.h"
#include "tests/testing/transformer.h"

namespace sp = shardpoint;
using sp::testing::ParallelConfig;

namespace {

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

int Fail(const std::string& what, const sp::Status& s) {
  std::fprintf(stderr, "demo: %s failed: %s\n", what.c_str(), s.ToString().c_str());
  return 1;
}

sp::Status FirstError(const std::vector<sp::Status>& all) {
  for (const sp::Status& s : all) {
    if (!s.ok()) return s;
  }
  return sp::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir = argc > 1 ? argv[1] : "demo_ckpt";
  sp::testing::ModelConfig model;
  if (const char* s = std::getenv("SHARDPOINT_DEMO_SCALE")) {
    int k = std::max(1, std::atoi(s));
    model.hidden *= k;
    model.ffn *= k;
  }
  const ParallelConfig save_layout{2, 2, 2, true};
  const ParallelConfig load_layout{4, 1, 2, true};

  std::printf(
      "shardpoint demo: %d layers, hidden %lld, ffn %lld, vocab %lld; bf16 params, fp32 Adam\n",
      model.layers, static_cast<long long>(model.hidden), static_cast<long long>(model.ffn),
      static_cast<long long>(model.vocab));
  auto t0 = std::chrono::steady_clock::now();
  const sp::testing::RefModel ref = sp::testing::MakeReference(model, /*seed=*/20261122);
  uint64_t model_bytes = 0;
  for (const auto& [key, t] : ref) model_bytes += t.bytes.size();
  std::printf("  %zu global tensors, %.1f MiB (reference built in %.2f s)\n", ref.size(),
              model_bytes / 1048576.0, Seconds(t0));

  // Save.
  std::vector<sp::testing::RankState> src(save_layout.world());
  uint64_t held = 0;
  for (int r = 0; r < save_layout.world(); ++r) {
    auto rs = sp::testing::BuildRankState(model, save_layout, r);
    if (!rs.ok()) return Fail("building the save layout", rs.status());
    src[r] = std::move(*rs);
    if (auto s = sp::testing::FillFromReference(ref, src[r].state.tensors); !s.ok()) {
      return Fail("filling rank " + std::to_string(r), s);
    }
    held += src[r].bytes;
  }
  std::printf("save: %d ranks as threads, %s; ranks hold %.1f MiB (with replicas)\n",
              save_layout.world(), save_layout.ToString().c_str(), held / 1048576.0);
  std::mutex mu;
  sp::SaveStats save_stats;
  t0 = std::chrono::steady_clock::now();
  sp::SaveOptions save_options;
  save_options.overwrite = true;
  sp::Status s = FirstError(sp::RunThreadRanks(save_layout.world(), [&](sp::Comm& comm) {
    auto st = sp::Save(src[comm.rank()].state, dir, comm, save_options);
    if (st.ok() && comm.rank() == 0) {
      std::lock_guard<std::mutex> lock(mu);
      save_stats = *st;
    }
    return st.status();
  }));
  if (!s.ok()) return Fail("save", s);
  double save_s = Seconds(t0);
  std::printf(
      "  wrote %.1f MiB (replicas stored once) in %d files, %lld chunks: %.2f s, %.2f GB/s\n",
      save_stats.bytes_written / 1048576.0, save_stats.num_files,
      static_cast<long long>(save_stats.num_chunks), save_s,
      save_stats.bytes_written / save_s / 1e9);
  src.clear();

  // Load into another layout.
  std::vector<sp::testing::RankState> dst(load_layout.world());
  for (int r = 0; r < load_layout.world(); ++r) {
    auto rs = sp::testing::BuildRankState(model, load_layout, r);
    if (!rs.ok()) return Fail("building the load layout", rs.status());
    dst[r] = std::move(*rs);
    for (sp::Object& o : dst[r].state.objects) o.bytes.clear();
    dst[r].state.common = "";
    dst[r].state.metadata_json.clear();
  }
  std::printf("load: %d ranks as threads, %s\n", load_layout.world(),
              load_layout.ToString().c_str());
  std::vector<uint64_t> read(load_layout.world());
  t0 = std::chrono::steady_clock::now();
  s = FirstError(sp::RunThreadRanks(load_layout.world(), [&](sp::Comm& comm) {
    auto lr = sp::Load(dst[comm.rank()].state, dir, comm);
    if (lr.ok()) read[comm.rank()] = lr->bytes_read;
    return lr.status();
  }));
  if (!s.ok()) return Fail("load", s);
  double load_s = Seconds(t0);
  uint64_t total_read = 0;
  for (uint64_t b : read) total_read += b;
  std::printf("  read %.1f MiB: %.2f s, %.2f GB/s\n", total_read / 1048576.0, load_s,
              total_read / load_s / 1e9);

  // Verify bit for bit.
  t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < load_layout.world(); ++r) {
    const sp::State& st = dst[r].state;
    if (auto c = sp::testing::CheckAgainstReference(ref, st.tensors); !c.ok()) {
      return Fail("verification of rank " + std::to_string(r), c);
    }
    if (st.objects[0].bytes != "rng-of-rank-" + std::to_string(r) ||
        st.common != std::string("{\"iteration\": 1000}") || st.metadata_json.empty()) {
      return Fail("verification of rank " + std::to_string(r),
                  sp::DataLossError("objects, common state or metadata differ"));
    }
  }
  std::printf(
      "verify: every tensor of every rank equals the original bit for bit "
      "(model and optimizer state), objects and common state restored (%.2f s)\n",
      Seconds(t0));
  std::string abs = std::filesystem::absolute(dir).string();
  // The CLI built beside the demo (scripts/demo.sh builds both), by its path.
#ifdef SP_CLI_PATH
  const std::string cli = SP_CLI_PATH;
#else
  const std::string cli = "shardpoint";
#endif
  std::printf("checkpoint: %s\n  try: %s inspect %s\n       %s verify %s\n", abs.c_str(),
              cli.c_str(), abs.c_str(), cli.c_str(), abs.c_str());
  if (cli != "shardpoint" && !std::filesystem::exists(cli)) {
    std::printf("  (not built yet: cmake --build <build dir> --target shardpoint_cli)\n");
  }
  return 0;
}
