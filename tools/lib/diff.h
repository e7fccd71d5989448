// `shardpoint diff A B`: two checkpoints (shardpoint or HF) compared tensor by
// tensor whatever their layouts; exit 0 when equal, 1 when they differ.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>

#include "shardpoint/hf.h"

namespace shardpoint::tools {

std::function<int()> AddDiff(CLI::App& app);
// One line per key that is not equal (all keys with show_equal), then
// "EQUAL: N tensors" or "DIFFERENT: ..." counts.
std::string DiffText(const DiffReport& r, bool show_equal);

}  // namespace shardpoint::tools
