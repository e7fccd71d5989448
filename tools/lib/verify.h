// `shardpoint verify DIR...`: re-read every byte of checkpoints and check
// checksums, tiling and file headers (public shardpoint/verify.h).
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>

#include "shardpoint/verify.h"

namespace shardpoint::tools {

// Registers the subcommand on `app`; the returned function runs it when it
// was selected and returns the exit code (-1 when it was not selected):
// 0 when every checkpoint checks, 1 when one has faults, 2 when one cannot
// be read at all.
std::function<int()> AddVerify(CLI::App& app);
// "FAULT: ..." lines, "verified DIR: counts (seconds)", then "OK" or
// "FAILED: N fault(s)". With `quiet`, only the faults and the FAILED line.
std::string VerifyText(const VerifyReport& r, const std::string& dir, bool quiet);
// One line of JSON: {"dir", "ok", counts, "seconds", "faults": [{"kind", "key",
// "chunk", "object_index", "file", "begin", "end", "message"}]}; or
// {"dir", "ok": false, "error"} when the checkpoint cannot be read.
std::string VerifyJson(const Result<VerifyReport>& r, const std::string& dir);

}  // namespace shardpoint::tools
