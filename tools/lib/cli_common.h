// Conventions every subcommand follows: exit codes, the error line, examples
// in --help, --quiet, byte sizes.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "shardpoint/status.h"
#include "shardpoint/storage.h"

namespace shardpoint::tools {

// 0: done, everything checked out. 1: done, and found faults or differences.
// 2: could not do it: a usage error or an unreadable input.
enum ExitCode : int { kExitOk = 0, kExitFound = 1, kExitError = 2 };

// Prints "shardpoint <command>: <status>" on stderr; returns kExitError.
int Fail(const std::string& command, const Status& status);
// Appends "Examples:" and one indented command line each to `cmd`'s --help.
void SetExamples(CLI::App* cmd, const std::vector<std::string>& examples);
// Adds -q/--quiet: no progress bar and no summary; errors and findings only.
void AddQuiet(CLI::App* cmd, bool& quiet);
// Adds --overwrite: replace an existing non-empty output directory whole
// (ExportHfOptions::overwrite); without it such a directory is refused.
void AddOverwrite(CLI::App* cmd, bool& overwrite);
// Adds --io-threads (default 4) and, hidden from --help, its old name
// --threads (an alias: either sets `threads`).
void AddIoThreads(CLI::App* cmd, int& threads, const std::string& what);
// --endpoint-url, --region, --profile, --addressing-style, --ca-bundle: where s3:// paths
// go and as whom (docs/object-store.md); what is not given comes from the AWS
// environment and profiles. Secrets only through those, never on a command line.
// --part-size-mib, --max-connections: throughput (0: the defaults).
struct StorageFlags {
  std::string endpoint, region, profile, addressing, ca_bundle;
  uint64_t part_size_mib = 0;
  int max_connections = 0;
  void Add(CLI::App* cmd);
  // The storage for a call: nullptr (DefaultStorage()) when no flag was given.
  Result<std::unique_ptr<Storage>> Make() const;
};
// "1.50 GiB", "512 B".
std::string HumanBytes(uint64_t n);

}  // namespace shardpoint::tools
