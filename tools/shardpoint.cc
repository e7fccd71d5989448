// The shardpoint CLI: parses flags and calls library functions (tools/lib/).
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <iostream>

#include "src/checkpoint/commit.h"
#include "src/checkpoint/verify.h"
#include "src/checkpoint/verify_dcp.h"
#include "src/dcp/dcp_dir.h"
#include "tools/lib/convert.h"
#include "tools/lib/diff.h"
#include "tools/lib/export_hf.h"
#include "tools/lib/hf_common.h"
#include "tools/lib/inspect.h"

namespace sp = shardpoint;

int main(int argc, char** argv) {
  CLI::App app{"shardpoint: inspect, verify, diff and convert distributed checkpoints"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "shardpoint " SP_VERSION);

  std::string dir;
  bool json = false;
  auto* inspect = app.add_subcommand("inspect", "print the tensors of a checkpoint");
  inspect->add_option("dir", dir, "checkpoint directory")->required();
  inspect->add_flag("--json", json, "print the whole manifest as JSON");

  int threads = 4;
  auto* verify = app.add_subcommand(
      "verify", "re-read everything, check every checksum and tiling; exit 1 on any fault");
  verify->add_option("dir", dir, "checkpoint directory")->required();
  verify->add_option("--threads", threads, "reader threads")->default_val(4);

  // Hugging Face interop (tools/lib/{export_hf,convert,diff}.cc).
  const std::function<int()> hf_commands[] = {sp::tools::AddExportHf(app),
                                              sp::tools::AddConvert(app), sp::tools::AddDiff(app)};

  CLI11_PARSE(app, argc, argv);
  for (const auto& run : hf_commands) {
    if (int rc = run(); rc >= 0) return rc;
  }
  sp::Storage* storage = sp::DefaultStorage();

  // A PyTorch DCP directory (docs/dcp.md) is detected by its .metadata.
  sp::Result<bool> dcp = sp::internal::IsDcpDir(storage, dir);
  const bool is_dcp = dcp.ok() && *dcp;
  if (*inspect) {
    sp::Result<sp::internal::Manifest> m = is_dcp ? [&]() -> sp::Result<sp::internal::Manifest> {
      SP_ASSIGN_OR_RETURN(sp::internal::DcpIndex idx, sp::internal::ReadDcpIndex(storage, dir));
      return std::move(idx.m);
    }()
        : sp::internal::ReadManifest(storage, dir);
    if (!m.ok()) {
      std::fprintf(stderr, "shardpoint inspect: %s\n", m.status().ToString().c_str());
      return 2;
    }
    std::cout << (json ? sp::internal::ManifestToJson(*m) + "\n"
                       : sp::tools::InspectTable(*m, dir));
    if (is_dcp && !json) std::cout << "PyTorch DCP checkpoint (no checksums)\n";
    return 0;
  }
  if (*verify) {
    auto start = std::chrono::steady_clock::now();
    sp::internal::VerifyOptions vo;
    vo.threads = threads;
    vo.progress = sp::tools::TerminalProgress("verify");
    sp::Result<sp::internal::VerifyReport> r =
        is_dcp ? sp::internal::VerifyDcp(storage, dir, vo)
               : sp::internal::VerifyCheckpoint(storage, dir, vo);
    if (!r.ok()) {
      std::fprintf(stderr, "shardpoint verify: %s\n", r.status().ToString().c_str());
      return 2;
    }
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (is_dcp) {
      std::cout << "PyTorch DCP checkpoint: DCP stores no checksums; checked the structure, item "
                   "bounds, coverage and the zip CRC-32 of every tensor storage entry\n";
    }
    std::cout << sp::tools::VerifyText(*r, dir, secs);
    return r->ok() ? 0 : 1;
  }
  return 0;
}
