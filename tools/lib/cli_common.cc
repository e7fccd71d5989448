#include "tools/lib/cli_common.h"

#include <cstdio>

#include "shardpoint/object_store.h"
#include "shardpoint/storage.h"

namespace shardpoint::tools {

int Fail(const std::string& command, const Status& status) {
  std::fprintf(stderr, "shardpoint %s: %s\n", command.c_str(), status.ToString().c_str());
  return kExitError;
}

void SetExamples(CLI::App* cmd, const std::vector<std::string>& examples) {
  std::string text = examples.size() == 1 ? "Example:\n" : "Examples:\n";
  for (const std::string& e : examples) text += "  " + e + "\n";
  cmd->footer(text);
}

void AddIoThreads(CLI::App* cmd, int& threads, const std::string& what) {
  cmd->add_option("--io-threads", threads, what + " (old name: --threads)")->default_val(4);
  cmd->add_option("--threads", threads, "old name of --io-threads")->group("");
}

void AddQuiet(CLI::App* cmd, bool& quiet) {
  cmd->add_flag("-q,--quiet", quiet, "no progress bar, no summary: only errors and findings");
}

void AddOverwrite(CLI::App* cmd, bool& overwrite) {
  cmd->add_flag("--overwrite", overwrite,
                "replace an existing non-empty output directory (atomically, once the new "
                "output is complete); without it one is refused");
}

void StorageFlags::Add(CLI::App* cmd) {
  const std::string group = "Object store (s3:// paths; default: the AWS environment and profiles)";
  cmd->add_option("--endpoint-url", endpoint, "S3 endpoint, e.g. http://127.0.0.1:7480")
      ->group(group);
  cmd->add_option("--region", region, "S3 region (default us-east-1)")->group(group);
  cmd->add_option("--profile", profile, "credentials profile of ~/.aws/credentials and config")
      ->group(group);
  cmd->add_option("--addressing-style", addressing,
                  "path (host/bucket/key) or virtual (bucket.host/key); default: virtual on "
                  "AWS, path with --endpoint-url")
      ->check(CLI::IsMember({"path", "virtual", "auto"}))
      ->group(group);
  cmd->add_option("--ca-bundle", ca_bundle,
                  "PEM file of the CA(s) an https endpoint's certificate must chain to "
                  "(default: AWS_CA_BUNDLE, the profile's ca_bundle, else the system's)")
      ->group(group);
  cmd->add_option("--part-size-mib", part_size_mib, "MiB per uploaded part, 5 to 5120 (default 16)")
      ->check(CLI::Range(5, 5120))
      ->group(group);
  cmd->add_option("--max-connections", max_connections,
                  "open connections and requests in flight (default 16)")
      ->check(CLI::PositiveNumber)
      ->group(group);
}

Result<std::unique_ptr<Storage>> StorageFlags::Make() const {
  if (endpoint.empty() && region.empty() && profile.empty() && addressing.empty() &&
      ca_bundle.empty() && part_size_mib == 0 && max_connections == 0) {
    return std::unique_ptr<Storage>();
  }
  ObjectStoreOptions o;
  o.endpoint = endpoint;
  o.region = region;
  o.profile = profile;
  o.addressing = addressing;
  o.ca_bundle = ca_bundle;
  o.part_size = part_size_mib << 20;
  o.max_connections = max_connections;
  return MakeObjectStoreStorage(o);
}

std::string HumanBytes(uint64_t n) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024 && u < 5) v /= 1024, ++u;
  char buf[32];
  if (u == 0) {
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(n));
  } else {
    std::snprintf(buf, sizeof buf, "%.2f %s", v, kUnits[u]);
  }
  return buf;
}

}  // namespace shardpoint::tools
