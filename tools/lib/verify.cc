#include "tools/lib/verify.h"

#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "tools/lib/cli_common.h"
#include "tools/lib/hf_common.h"

namespace shardpoint::tools {
namespace {

const char* KindName(VerifyFault::Kind k) {
  switch (k) {
    case VerifyFault::Kind::kTiling:
      return "tiling";
    case VerifyFault::Kind::kFileHeader:
      return "file_header";
    case VerifyFault::Kind::kChunk:
      return "chunk";
    case VerifyFault::Kind::kObject:
      return "object";
  }
  return "unknown";
}

}  // namespace

std::string VerifyText(const VerifyReport& r, const std::string& dir, bool quiet) {
  std::ostringstream os;
  for (const VerifyFault& f : r.faults) os << "FAULT: " << f.message << "\n";
  if (!quiet) {
    os << "verified " << dir << ": " << r.tensors << " tensors, " << r.chunks_checked << " chunks, "
       << r.objects_checked << " objects, " << HumanBytes(r.bytes_checked) << " in " << r.files
       << " files";
    char buf[64];
    std::snprintf(buf, sizeof buf, " (%.2f s)\n", r.seconds);
    os << buf;
  }
  if (r.ok()) {
    if (!quiet) os << "OK\n";
  } else {
    os << "FAILED: " << (quiet ? dir + ": " : "") << r.faults.size() << " fault(s)\n";
  }
  return os.str();
}

std::string VerifyJson(const Result<VerifyReport>& r, const std::string& dir) {
  nlohmann::ordered_json j;
  j["dir"] = dir;
  if (!r.ok()) {
    j["ok"] = false;
    j["error"] = r.status().ToString();
  } else {
    j["ok"] = r->ok();
    j["tensors"] = r->tensors;
    j["chunks_checked"] = r->chunks_checked;
    j["objects_checked"] = r->objects_checked;
    j["bytes_checked"] = r->bytes_checked;
    j["files"] = r->files;
    j["seconds"] = r->seconds;
    j["faults"] = nlohmann::ordered_json::array();
    for (const VerifyFault& f : r->faults) {
      nlohmann::ordered_json jf;
      jf["kind"] = KindName(f.kind);
      jf["key"] = f.key;
      jf["chunk"] = f.chunk;
      jf["object_index"] = f.object_index;
      jf["file"] = f.file;
      jf["begin"] = f.begin;
      jf["end"] = f.end;
      jf["message"] = f.message;
      j["faults"].push_back(std::move(jf));
    }
  }
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

std::function<int()> AddVerify(CLI::App& app) {
  struct Args {
    std::vector<std::string> dirs;
    int io_threads = 4;
    bool json = false, quiet = false;
    StorageFlags storage;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "verify",
      "re-read checkpoints: every checksum, the tiling, the file headers; exit 1 on any fault, "
      "2 when one cannot be read");
  cmd->add_option("dir", a->dirs, "checkpoint directories")->required();
  AddIoThreads(cmd, a->io_threads, "reader threads");
  cmd->add_flag("--json", a->json,
                "one line of JSON per directory (faults as records); no progress bar");
  AddQuiet(cmd, a->quiet);
  a->storage.Add(cmd);
  SetExamples(cmd, {"shardpoint verify ckpt/iter_0001000",
                    "shardpoint verify --quiet --io-threads 16 ckpt/iter_*"});
  return [cmd, a]() -> int {
    if (!*cmd) return -1;
    Result<std::unique_ptr<Storage>> storage = a->storage.Make();
    if (!storage.ok()) return Fail("verify", storage.status());
    int rc = kExitOk;
    for (const std::string& dir : a->dirs) {
      VerifyOptions o;
      o.storage = storage->get();
      o.io_threads = a->io_threads;
      if (!a->json && !a->quiet) o.progress = TerminalProgress("verify");
      Result<VerifyReport> r = VerifyCheckpoint(dir, o);
      if (a->json) {
        std::cout << VerifyJson(r, dir) << std::flush;
      } else if (r.ok()) {
        if (!a->quiet && r->kind == CheckpointKind::kPyTorchDcp) {
          std::cout << "PyTorch DCP checkpoint: DCP stores no checksums; checked the structure, "
                       "item bounds, coverage and the zip CRC-32 of every tensor storage entry\n";
        }
        std::cout << VerifyText(*r, dir, a->quiet) << std::flush;
      }
      if (!r.ok()) {
        Fail("verify", r.status());
        rc = kExitError;
      } else if (!r->ok() && rc == kExitOk) {
        rc = kExitFound;
      }
    }
    return rc;
  };
}

}  // namespace shardpoint::tools
