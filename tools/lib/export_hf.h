// `shardpoint export-hf CKPT OUT`: a checkpoint as an HF safetensors model.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

namespace shardpoint::tools {

// Registers the subcommand on `app`; the returned function runs it when it
// was selected and returns the exit code.
std::function<int()> AddExportHf(CLI::App& app);

}  // namespace shardpoint::tools
