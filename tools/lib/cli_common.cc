#include "tools/lib/cli_common.h"

#include <cstdio>

#include "shardpoint/storage.h"

namespace shardpoint::tools {

int Fail(const std::string& command, const Status& status) {
  std::fprintf(stderr, "shardpoint %s: %s\n", command.c_str(), status.ToString().c_str());
  return kExitError;
}

void SetExamples(CLI::App* cmd, const std::vector<std::string>& examples) {
  std::string text = examples.size() == 1 ? "Example:\n" : "Examples:\n";
  for (const std::string& e : examples) text += "  " + e + "\n";
  cmd->footer(text);
}

void AddIoThreads(CLI::App* cmd, int& threads, const std::string& what) {
  cmd->add_option("--io-threads", threads, what + " (old name: --threads)")->default_val(4);
  cmd->add_option("--threads", threads, "old name of --io-threads")->group("");
}

void AddQuiet(CLI::App* cmd, bool& quiet) {
  cmd->add_flag("-q,--quiet", quiet, "no progress bar, no summary: only errors and findings");
}

void AddOverwrite(CLI::App* cmd, bool& overwrite) {
  cmd->add_flag("--overwrite", overwrite,
                "replace an existing non-empty output directory (atomically, once the new "
                "output is complete); without it one is refused");
}

std::string HumanBytes(uint64_t n) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024 && u < 5) v /= 1024, ++u;
  char buf[32];
  if (u == 0) {
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(n));
  } else {
    std::snprintf(buf, sizeof buf, "%.2f %s", v, kUnits[u]);
  }
  return buf;
}

}  // namespace shardpoint::tools
