// Runs a shell command and captures its output: for tests that run the CLI.
#pragma once

#include <string>

namespace shardpoint::testing {

struct CommandResult {
  int exit_code = -1;  // -1: could not start, or did not exit normally
  std::string out;     // stdout (add " 2>&1" to the command for stderr too)
};

// Runs `command` with /bin/sh (popen) and waits for it.
CommandResult RunCommand(const std::string& command);

}  // namespace shardpoint::testing
