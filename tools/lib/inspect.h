// `shardpoint inspect DIR...`: what a checkpoint holds, from its manifest
// alone (public shardpoint/verify.h: DescribeCheckpoint).
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>

#include "shardpoint/verify.h"

namespace shardpoint::tools {

// Registers the subcommand on `app`; the returned function runs it when it
// was selected and returns the exit code (-1 when it was not selected).
std::function<int()> AddInspect(CLI::App& app);
// A table: key, dtype, global shape, chunks, bytes; then totals.
std::string InspectTable(const CheckpointDescription& d, const std::string& dir);
// One line of JSON: {"dir": DIR, "manifest": {...}}.
std::string InspectJson(const CheckpointDescription& d, const std::string& dir);

}  // namespace shardpoint::tools
