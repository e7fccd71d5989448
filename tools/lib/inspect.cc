#include "tools/lib/inspect.h"

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "tools/lib/cli_common.h"

namespace shardpoint::tools {

std::string InspectTable(const CheckpointDescription& d, const std::string& dir) {
  size_t key_w = 3;
  for (const auto& t : d.tensors) key_w = std::max(key_w, t.key.size());
  key_w = std::min<size_t>(key_w, 72);
  std::ostringstream os;
  char line[512];
  std::snprintf(line, sizeof line, "%-*s  %-7s  %-22s  %6s  %12s\n", static_cast<int>(key_w), "key",
                "dtype", "global shape", "chunks", "bytes");
  os << line;
  uint64_t total = 0;
  int64_t chunks = 0;
  for (const auto& t : d.tensors) {
    const uint64_t bytes = t.nbytes();
    total += bytes;
    chunks += t.chunks.size();
    std::snprintf(line, sizeof line, "%-*s  %-7s  %-22s  %6zu  %12s\n", static_cast<int>(key_w),
                  t.key.c_str(), std::string(DTypeName(t.dtype)).c_str(),
                  ShapeToString(t.shape).c_str(), t.chunks.size(), HumanBytes(bytes).c_str());
    os << line;
  }
  uint64_t object_bytes = 0;
  for (const auto& o : d.objects) object_bytes += o.nbytes;
  os << "\ncheckpoint " << dir << " (format v" << d.format_version << ")\n"
     << "  tensors: " << d.tensors.size() << ", chunks: " << chunks << ", " << HumanBytes(total)
     << "\n"
     << "  objects: " << d.objects.size() << ", " << HumanBytes(object_bytes) << "\n"
     << "  common:  " << (d.has_common ? HumanBytes(d.common_bytes) : std::string("none")) << "\n"
     << "  files:   " << d.files.size() << "\n";
  return os.str();
}

std::string InspectJson(const CheckpointDescription& d, const std::string& dir) {
  nlohmann::ordered_json j;
  j["dir"] = dir;
  j["kind"] = CheckpointKindName(d.kind);
  j["manifest"] = nlohmann::ordered_json::parse(d.json);
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

std::function<int()> AddInspect(CLI::App& app) {
  struct Args {
    std::vector<std::string> dirs;
    bool json = false;
    StorageFlags storage;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "inspect", "print the tensors of checkpoints: key, dtype, global shape, chunks, bytes");
  cmd->add_option("dir", a->dirs, "checkpoint directories")->required();
  cmd->add_flag("--json", a->json,
                "one line of JSON per directory: {\"dir\": ..., \"manifest\": {...}}");
  a->storage.Add(cmd);
  SetExamples(cmd,
              {"shardpoint inspect ckpt/iter_0001000",
               "shardpoint inspect --endpoint-url http://127.0.0.1:7480 s3://b/run/iter_0001000",
               "shardpoint inspect --json ckpt/iter_* | jq .manifest.tensors[].key"});
  return [cmd, a]() -> int {
    if (!*cmd) return -1;
    Result<std::unique_ptr<Storage>> storage = a->storage.Make();
    if (!storage.ok()) return Fail("inspect", storage.status());
    DescribeOptions o;
    o.storage = storage->get();
    int rc = kExitOk;
    for (size_t i = 0; i < a->dirs.size(); ++i) {
      const std::string& dir = a->dirs[i];
      Result<CheckpointDescription> d = DescribeCheckpoint(dir, o);
      if (!d.ok()) {
        rc = Fail("inspect", d.status());
        continue;
      }
      if (a->json) {
        std::cout << InspectJson(*d, dir);
      } else {
        std::cout << (i > 0 ? "\n" : "") << InspectTable(*d, dir);
        const bool dcp = d->kind == CheckpointKind::kPyTorchDcp;
        if (dcp) std::cout << "PyTorch DCP checkpoint (no checksums)\n";
        // Megatron torch_dist: metadata.json and common.pt, rendered (docs/dcp.md).
        if (dcp && d->metadata_json.find("\"megatron_torch_dist\"") != std::string::npos) {
          std::cout << "Megatron torch_dist checkpoint: " << d->metadata_json << "\n";
        }
      }
    }
    return rc;
  };
}

}  // namespace shardpoint::tools
