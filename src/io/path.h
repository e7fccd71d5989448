// Joining a directory and a name into a path, the one way every module does.
#pragma once

#include <string>

namespace shardpoint::internal_io {

// "<dir>/<name>"; `name` when `dir` is empty; no second slash when `dir`
// ends in one.
std::string JoinPath(const std::string& dir, const std::string& name);

}  // namespace shardpoint::internal_io
