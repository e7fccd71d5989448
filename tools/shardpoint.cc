// The shardpoint CLI: each subcommand lives in tools/lib/ and uses only the
// public API (include/shardpoint/). This file parses, dispatches, and applies
// the conventions: --version, usage errors exit 2 with the usage on stderr.
#include <CLI/CLI.hpp>
#include <functional>
#include <iostream>
#include <vector>

#include "tools/lib/cli_common.h"
#include "tools/lib/convert.h"
#include "tools/lib/diff.h"
#include "tools/lib/export_hf.h"
#include "tools/lib/inspect.h"
#include "tools/lib/verify.h"

#ifndef SP_VERSION
#error "SP_VERSION must be defined by the build"
#endif

namespace sp = shardpoint;

int main(int argc, char** argv) {
  CLI::App app{"shardpoint: inspect, verify, compare and convert distributed checkpoints",
               "shardpoint"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "shardpoint " SP_VERSION);
  sp::tools::SetExamples(&app,
                         {"shardpoint verify ckpt/iter_0001000", "shardpoint <command> --help"});

  const std::vector<std::function<int()>> commands = {
      sp::tools::AddInspect(app), sp::tools::AddVerify(app), sp::tools::AddExportHf(app),
      sp::tools::AddConvert(app), sp::tools::AddDiff(app)};

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);  // --help: usage on stdout, exit 0
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // help() is the usage of the subcommand the user was typing, if any.
    std::cerr << "shardpoint: " << e.what() << "\n\n" << app.help();
    return sp::tools::kExitError;
  }
  for (const auto& run : commands) {
    if (int rc = run(); rc >= 0) return rc;
  }
  return sp::tools::kExitError;
}
