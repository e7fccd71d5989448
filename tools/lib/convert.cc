#include "tools/lib/convert.h"

#include <cstdio>
#include <memory>

#include "tools/lib/cli_common.h"
#include "tools/lib/hf_common.h"

namespace shardpoint::tools {

std::function<int()> AddConvert(CLI::App& app) {
  struct Args {
    std::string src, dst, max_shard = "5GB", dtype;
    HfFlags hf;
    bool quiet = false;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "convert", "offline conversion: an HF model to a shardpoint checkpoint, or back");
  cmd->add_option("src", a->src, "HF model or shardpoint checkpoint directory")->required();
  cmd->add_option("dst", a->dst, "output directory")->required();
  cmd->add_option("--max-shard-size", a->max_shard, "to HF: data bytes per file")
      ->default_val("5GB");
  cmd->add_option("--dtype", a->dtype, "convert floating tensors, e.g. bf16");
  a->hf.Add(cmd);
  AddQuiet(cmd, a->quiet);
  SetExamples(cmd, {"shardpoint convert Llama-3-8B/ ckpt/iter_0000000 --mapping llama",
                    "shardpoint convert ckpt/iter_0001000 hf_out --mapping llama"});
  return [cmd, a]() -> int {
    if (!*cmd) return -1;
    auto fail = [](const Status& s) {
      std::fprintf(stderr, "shardpoint convert: %s\n", s.ToString().c_str());
      return 2;
    };
    Result<HfMapping> mapping = LoadMapping(a->hf.mapping);
    if (!mapping.ok()) return fail(mapping.status());
    Result<uint64_t> max_shard = ParseByteSize(a->max_shard);
    if (!max_shard.ok()) return fail(max_shard.status());
    Result<std::map<std::string, int64_t>> vars = ParseVariables(a->hf.sets);
    if (!vars.ok()) return fail(vars.status());
    ExportHfOptions o;
    o.max_shard_size = *max_shard;
    o.threads = a->hf.threads;
    o.variables = *vars;
    if (!a->quiet) o.progress = TerminalProgress("convert");
    if (!a->dtype.empty()) {
      Result<DType> d = ParseDType(a->dtype);
      if (!d.ok()) return fail(d.status());
      o.dtype = *d;
    }
    Result<bool> manifest = DefaultStorage()->Exists(a->src + "/manifest");
    if (!manifest.ok()) return fail(manifest.status());
    const bool to_hf = *manifest;
    Result<ExportHfStats> st = to_hf ? ExportHf(a->src, a->dst, *mapping, o)
                                     : ConvertHfToShardpoint(a->src, a->dst, *mapping, o);
    if (!st.ok()) return fail(st.status());
    if (a->quiet) return 0;
    // A PyTorch DCP directory (.metadata) converts like an HF model (docs/dcp.md).
    Result<bool> dcp = DefaultStorage()->Exists(a->src + "/.metadata");
    const char* from = to_hf ? "shardpoint" : (dcp.ok() && *dcp ? "PyTorch DCP" : "HF");
    std::printf("converted %s (%s) -> %s (%s): %lld tensors, %s, %.2f s, peak RSS %s\n",
                a->src.c_str(), from, a->dst.c_str(), to_hf ? "HF" : "shardpoint",
                static_cast<long long>(st->tensors), HumanBytes(st->bytes).c_str(), st->seconds,
                HumanBytes(PeakRssBytes()).c_str());
    return 0;
  };
}

}  // namespace shardpoint::tools
