// Shared pieces of the HF subcommands (export-hf, convert, diff): progress
// bar on a terminal (also used by verify), peak RSS, byte sizes, --set
// variables, --mapping, the options of an export or conversion.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "shardpoint/hf.h"

namespace shardpoint::tools {

// A progress callback that redraws one line on stderr at most 10 times a
// second when stderr is a terminal, and does nothing otherwise.
HfProgress TerminalProgress(const std::string& label);
// Peak resident set size of this process in bytes (getrusage), 0 if unknown.
uint64_t PeakRssBytes();
// Parses "5GB", "500MB", "2GiB", "123" (bytes) into bytes.
Result<uint64_t> ParseByteSize(const std::string& text);
// Parses "name=value" pairs (integers) for --set.
Result<std::map<std::string, int64_t>> ParseVariables(const std::vector<std::string>& sets);

// The shipped mapping named `path` ("llama", "qwen_moe": built into the
// binary, found first whatever the working directory holds), else the JSON
// file at `path`, or the identity for "".
Result<HfMapping> LoadMapping(const std::string& path);
// Flags every HF subcommand takes.
struct HfFlags {
  std::string mapping;
  std::vector<std::string> sets;
  int io_threads = 4;
  void Add(CLI::App* cmd);
};

// The options of an export or conversion: io_threads and variables from
// `hf`, --max-shard-size, --dtype (when given), progress on a terminal under
// `label` unless `quiet`. Errors name the flag at fault.
Result<ExportHfOptions> ExportOptions(const HfFlags& hf, const std::string& max_shard,
                                      const std::string& dtype, bool quiet,
                                      const std::string& label);

}  // namespace shardpoint::tools
