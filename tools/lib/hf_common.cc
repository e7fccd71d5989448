#include "tools/lib/hf_common.h"

#include <sys/resource.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <memory>

#include "shardpoint/hf_rules.h"
#include "tools/lib/cli_common.h"

namespace shardpoint::tools {

HfProgress TerminalProgress(const std::string& label) {
  if (!isatty(STDERR_FILENO)) return nullptr;
  struct State {
    std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now(), last;
  };
  auto st = std::make_shared<State>();
  return [st, label](uint64_t done, uint64_t total) {
    const auto now = std::chrono::steady_clock::now();
    if (done < total && now - st->last < std::chrono::milliseconds(100)) return;
    st->last = now;
    const double frac = total ? static_cast<double>(done) / total : 1.0;
    const double secs = std::chrono::duration<double>(now - st->start).count();
    const int width = 30, fill = static_cast<int>(frac * width);
    std::fprintf(stderr, "\r%s [%.*s%*s] %5.1f%%  %.2f GB/s", label.c_str(), fill,
                 "##############################", width - fill, "", 100 * frac,
                 secs > 0 ? done / secs / 1e9 : 0.0);
    if (done >= total) std::fputc('\n', stderr);
    std::fflush(stderr);
  };
}

uint64_t PeakRssBytes() {
  struct rusage ru {};
  if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
  return static_cast<uint64_t>(ru.ru_maxrss) * 1024;  // Linux: KiB
}

Result<uint64_t> ParseByteSize(const std::string& text) {
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.'))
    ++i;
  if (i == 0) return InvalidArgumentError("size '" + text + "': expected a number and a unit");
  double v = std::stod(text.substr(0, i));
  std::string unit;
  for (char c : text.substr(i))
    unit += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  double mult = 0;
  if (unit.empty() || unit == "B") mult = 1;
  if (unit == "KB") mult = 1e3;
  if (unit == "MB") mult = 1e6;
  if (unit == "GB") mult = 1e9;
  if (unit == "TB") mult = 1e12;
  if (unit == "KIB") mult = 1024.0;
  if (unit == "MIB") mult = 1024.0 * 1024;
  if (unit == "GIB") mult = 1024.0 * 1024 * 1024;
  if (mult == 0 || v * mult < 1) {
    return InvalidArgumentError("size '" + text +
                                "': unknown unit (B, KB, MB, GB, TB, KiB, MiB, GiB)");
  }
  return static_cast<uint64_t>(v * mult);
}

Result<std::map<std::string, int64_t>> ParseVariables(const std::vector<std::string>& sets) {
  std::map<std::string, int64_t> out;
  for (const std::string& s : sets) {
    const size_t eq = s.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == s.size()) {
      return InvalidArgumentError("--set '" + s + "': expected name=integer");
    }
    try {
      size_t used = 0;
      out[s.substr(0, eq)] = std::stoll(s.substr(eq + 1), &used);
      if (used != s.size() - eq - 1) throw std::invalid_argument(s);
    } catch (const std::exception&) {
      return InvalidArgumentError("--set '" + s + "': expected name=integer");
    }
  }
  return out;
}

Result<HfMapping> LoadMapping(const std::string& path) {
  if (path.empty()) return IdentityHfMapping();
  // A shipped name wins over anything of that name in the working directory;
  // a file of that name is reached as ./name.
  for (const std::string& name : ShippedHfMappingNames()) {
    if (path == name) return ShippedHfMapping(name);
  }
  return ReadHfMapping(path);
}

void HfFlags::Add(CLI::App* cmd) {
  cmd->add_option("--mapping", mapping,
                  "name-mapping rules: a shipped name (llama, megatron_llama, megatron_moe, "
                  "qwen_moe; built in) or a JSON "
                  "file (./name for a file named like a shipped one); "
                  "default: HF names are keys");
  cmd->add_option("--set", sets, "a rule variable, name=integer (e.g. num_key_value_heads=8)");
  AddIoThreads(cmd, io_threads, "I/O threads");
}

Result<ExportHfOptions> ExportOptions(const HfFlags& hf, const std::string& max_shard,
                                      const std::string& dtype, bool quiet,
                                      const std::string& label) {
  ExportHfOptions o;
  SP_ASSIGN_OR_RETURN(o.max_shard_size, ParseByteSize(max_shard));
  SP_ASSIGN_OR_RETURN(o.variables, ParseVariables(hf.sets));
  o.io_threads = hf.io_threads;
  if (!quiet) o.progress = TerminalProgress(label);
  if (!dtype.empty()) {
    SP_ASSIGN_OR_RETURN(o.dtype, ParseDType(dtype));
  }
  return o;
}

}  // namespace shardpoint::tools
