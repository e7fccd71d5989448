// `shardpoint convert SRC DST`: offline conversion, HF <-> shardpoint (the
// direction follows from what SRC is).
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

namespace shardpoint::tools {

std::function<int()> AddConvert(CLI::App& app);

}  // namespace shardpoint::tools
