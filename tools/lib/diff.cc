#include "tools/lib/diff.h"

#include <cstdio>
#include <iostream>
#include <memory>
#include <sstream>

#include "tools/lib/cli_common.h"
#include "tools/lib/hf_common.h"

namespace shardpoint::tools {

std::string DiffText(const DiffReport& r, bool show_equal) {
  std::ostringstream os;
  int64_t counts[5] = {};
  for (const DiffEntry& e : r.entries) {
    ++counts[e.kind];
    switch (e.kind) {
      case DiffEntry::kEqual:
        if (show_equal)
          os << "  equal      " << e.key << (e.note.empty() ? "" : "  (" + e.note + ")") << "\n";
        break;
      case DiffEntry::kDifferent: {
        char buf[96];
        std::snprintf(buf, sizeof buf, "  (%lld elements, max |a-b| %.6g)",
                      static_cast<long long>(e.num_different), e.max_abs_diff);
        os << "  DIFFERENT  " << e.key << buf << "\n";
        break;
      }
      case DiffEntry::kOnlyA:
        os << "  only in A  " << e.key << "\n";
        break;
      case DiffEntry::kOnlyB:
        os << "  only in B  " << e.key << "\n";
        break;
      case DiffEntry::kMismatch:
        os << "  MISMATCH   " << e.key << "  (" << e.note << ")\n";
        break;
    }
  }
  if (r.equal()) {
    os << "EQUAL: " << counts[DiffEntry::kEqual] << " tensors\n";
  } else {
    os << "DIFFERENT: " << counts[DiffEntry::kEqual] << " equal, " << counts[DiffEntry::kDifferent]
       << " different, " << counts[DiffEntry::kMismatch] << " mismatched, "
       << counts[DiffEntry::kOnlyA] << " only in A, " << counts[DiffEntry::kOnlyB]
       << " only in B\n";
  }
  return os.str();
}

std::function<int()> AddDiff(CLI::App& app) {
  struct Args {
    std::string a, b;
    double atol = 0;
    bool all = false, quiet = false;
    HfFlags hf;
    StorageFlags storage;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "diff", "compare two checkpoints (shardpoint or HF) tensor by tensor; exit 1 if they differ");
  cmd->add_option("a", a->a, "checkpoint or HF model directory")->required();
  cmd->add_option("b", a->b, "checkpoint or HF model directory")->required();
  cmd->add_option("--atol", a->atol, "differences up to this count as equal (default: bitwise)");
  cmd->add_flag("--all", a->all, "list equal tensors too");
  a->hf.Add(cmd);
  cmd->add_flag("-q,--quiet", a->quiet, "print nothing but errors: the exit code says it");
  a->storage.Add(cmd);
  SetExamples(cmd, {"shardpoint diff ckpt/iter_0001000 ckpt_resharded/iter_0001000",
                    "shardpoint diff ckpt/iter_0001000 Llama-3-8B/ --mapping llama --atol 1e-3"});
  return [cmd, a]() -> int {
    if (!*cmd) return -1;
    auto fail = [](const Status& s) {
      std::fprintf(stderr, "shardpoint diff: %s\n", s.ToString().c_str());
      return 2;
    };
    Result<HfMapping> mapping = LoadMapping(a->hf.mapping);
    if (!mapping.ok()) return fail(mapping.status());
    Result<std::map<std::string, int64_t>> vars = ParseVariables(a->hf.sets);
    if (!vars.ok()) return fail(vars.status());
    Result<std::unique_ptr<Storage>> storage = a->storage.Make();
    if (!storage.ok()) return fail(storage.status());
    DiffOptions o;
    o.storage = storage->get();
    o.io_threads = a->hf.io_threads;
    o.atol = a->atol;
    o.variables = *vars;
    Result<DiffReport> r = DiffCheckpoints(a->a, a->b, *mapping, o);
    if (!r.ok()) return fail(r.status());
    if (!a->quiet) std::cout << DiffText(*r, a->all);
    return r->equal() ? 0 : 1;
  };
}

}  // namespace shardpoint::tools
