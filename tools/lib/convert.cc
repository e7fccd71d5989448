#include "tools/lib/convert.h"

#include <cstdio>
#include <memory>

#include "shardpoint/checkpoint_kind.h"
#include "tools/lib/cli_common.h"
#include "tools/lib/hf_common.h"

namespace shardpoint::tools {

std::function<int()> AddConvert(CLI::App& app) {
  struct Args {
    std::string src, dst, max_shard = "5GB", dtype, to, torch = "2";
    HfFlags hf;
    bool quiet = false, overwrite = false;
    StorageFlags storage;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "convert",
      "offline conversion: an HF model or PyTorch DCP directory to a shardpoint checkpoint, "
      "a shardpoint checkpoint to an HF model, or any of them to PyTorch DCP (--to dcp)");
  cmd->add_option("src", a->src, "HF model, PyTorch DCP or shardpoint checkpoint directory")
      ->required();
  cmd->add_option("dst", a->dst, "output directory")->required();
  cmd->add_option("--max-shard-size", a->max_shard, "to HF: data bytes per file")
      ->default_val("5GB");
  cmd->add_option("--dtype", a->dtype, "convert floating tensors, e.g. bf16");
  cmd->add_option("--to", a->to,
                  "dcp: write a PyTorch DCP directory (see docs/dcp.md); "
                  "default: shardpoint <-> HF by what SRC is")
      ->check(CLI::IsMember({"dcp"}));
  cmd->add_option("--torch", a->torch,
                  "with --to dcp: the torch that loads it, 2 (torch >= 2.0) or 1.13; each reads "
                  "only its own class paths")
      ->default_val("2")
      ->check(CLI::IsMember({"2", "1.13"}));
  a->hf.Add(cmd);
  AddQuiet(cmd, a->quiet);
  AddOverwrite(cmd, a->overwrite);
  a->storage.Add(cmd);
  SetExamples(cmd, {"shardpoint convert Llama-3-8B/ ckpt/iter_0000000 --mapping llama",
                    "shardpoint convert ckpt/iter_0001000 hf_out --mapping llama",
                    "shardpoint convert --to dcp ckpt/iter_0001000 dcp_out",
                    "shardpoint convert --to dcp --torch 1.13 ckpt/iter_0001000 dcp_out"});
  return [cmd, a]() -> int {
    if (!*cmd) return -1;
    auto fail = [](const Status& s) {
      std::fprintf(stderr, "shardpoint convert: %s\n", s.ToString().c_str());
      return 2;
    };
    Result<HfMapping> mapping = LoadMapping(a->hf.mapping);
    if (!mapping.ok()) return fail(mapping.status());
    Result<ExportHfOptions> opts =
        ExportOptions(a->hf, a->max_shard, a->dtype, a->quiet, "convert");
    if (!opts.ok()) return fail(opts.status());
    ExportHfOptions& o = *opts;
    o.dcp_torch_major = a->torch == "1.13" ? 1 : 2;
    o.overwrite = a->overwrite;
    Result<std::unique_ptr<Storage>> storage = a->storage.Make();
    if (!storage.ok()) return fail(storage.status());
    o.storage = storage->get();
    // The library opens SRC once and says what it was (source_kind): a
    // shardpoint checkpoint converts to HF, anything else to shardpoint.
    const bool to_dcp = a->to == "dcp";
    Result<ExportHfStats> st =
        to_dcp ? ConvertToDcp(a->src, a->dst, *mapping, o) : Convert(a->src, a->dst, *mapping, o);
    if (!st.ok()) return fail(st.status());
    if (a->quiet) return 0;
    const bool shardpoint = st->source_kind == CheckpointKind::kShardpoint;
    const bool to_hf = shardpoint && !to_dcp;
    // A PyTorch DCP directory converts like an HF model (docs/dcp.md).
    const char* from = shardpoint                                       ? "shardpoint"
                       : st->source_kind == CheckpointKind::kPyTorchDcp ? "PyTorch DCP"
                                                                        : "HF";
    const char* to = to_dcp ? "PyTorch DCP" : to_hf ? "HF" : "shardpoint";
    std::printf("converted %s (%s) -> %s (%s): %lld tensors, %s, %.2f s, peak RSS %s\n",
                a->src.c_str(), from, a->dst.c_str(), to, static_cast<long long>(st->tensors),
                HumanBytes(st->bytes).c_str(), st->seconds, HumanBytes(PeakRssBytes()).c_str());
    return 0;
  };
}

}  // namespace shardpoint::tools
