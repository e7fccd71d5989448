#include "tools/lib/export_hf.h"

#include <cstdio>
#include <memory>

#include "tools/lib/cli_common.h"
#include "tools/lib/hf_common.h"

namespace shardpoint::tools {

std::function<int()> AddExportHf(CLI::App& app) {
  struct Args {
    std::string ckpt, out, max_shard = "5GB", dtype;
    size_t block_mb = 64;
    bool quiet = false, overwrite = false;
    HfFlags hf;
    StorageFlags storage;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "export-hf", "write a checkpoint as HF safetensors (model-0000i-of-0000N + index)");
  cmd->add_option("ckpt", a->ckpt, "shardpoint checkpoint (or HF model) directory")->required();
  cmd->add_option("out", a->out, "output directory")->required();
  cmd->add_option("--max-shard-size", a->max_shard, "data bytes per file, e.g. 5GB, 500MB")
      ->default_val("5GB");
  cmd->add_option("--dtype", a->dtype, "convert floating tensors, e.g. bf16, f16, f32");
  cmd->add_option("--block-mb", a->block_mb, "MiB read and written at once per thread")
      ->default_val(64);
  a->hf.Add(cmd);
  AddQuiet(cmd, a->quiet);
  AddOverwrite(cmd, a->overwrite);
  a->storage.Add(cmd);
  SetExamples(cmd, {"shardpoint export-hf ckpt/iter_0001000 hf_out --mapping llama --dtype bf16",
                    "shardpoint export-hf ckpt/iter_0001000 hf_out --max-shard-size 2GB"});
  return [cmd, a]() -> int {
    if (!*cmd) return -1;
    auto fail = [](const Status& s) {
      std::fprintf(stderr, "shardpoint export-hf: %s\n", s.ToString().c_str());
      return 2;
    };
    Result<HfMapping> mapping = LoadMapping(a->hf.mapping);
    if (!mapping.ok()) return fail(mapping.status());
    Result<ExportHfOptions> o = ExportOptions(a->hf, a->max_shard, a->dtype, a->quiet, "export-hf");
    if (!o.ok()) return fail(o.status());
    o->block_bytes = a->block_mb << 20;
    o->overwrite = a->overwrite;
    Result<std::unique_ptr<Storage>> storage = a->storage.Make();
    if (!storage.ok()) return fail(storage.status());
    o->storage = storage->get();
    Result<ExportHfStats> st = ExportHf(a->ckpt, a->out, *mapping, *o);
    if (!st.ok()) return fail(st.status());
    if (a->quiet) return 0;
    std::printf(
        "exported %s -> %s: %lld tensors, %s in %d file(s), %.2f s, %.2f GB/s, "
        "peak RSS %s\n",
        a->ckpt.c_str(), a->out.c_str(), static_cast<long long>(st->tensors),
        HumanBytes(st->bytes).c_str(), st->files, st->seconds,
        st->seconds > 0 ? st->bytes / st->seconds / 1e9 : 0.0, HumanBytes(PeakRssBytes()).c_str());
    return 0;
  };
}

}  // namespace shardpoint::tools
