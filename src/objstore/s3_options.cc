#include "src/objstore/s3_options.h"

#include <cstdlib>
#include <fstream>
#include <map>
#include <utility>

namespace shardpoint::internal_objstore {
namespace {

using Section = std::map<std::string, std::string>;

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? std::string() : std::string(v);
}

std::string Trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return std::string();
  return s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
}

// The `wanted` section of an INI file as the AWS tools write it. A missing
// file is an empty section; a line that is neither a section, a comment nor
// `key = value` is an error naming the file and line.
Result<Section> ReadIniSection(const std::string& path, const std::string& wanted) {
  std::ifstream in(path);
  Section out;
  if (!in) return out;
  std::string line;
  std::string current;
  for (int number = 1; std::getline(in, line); ++number) {
    const std::string t = Trim(line);
    if (t.empty() || t[0] == '#' || t[0] == ';') continue;
    if (t.front() == '[') {
      if (t.back() != ']') {
        return InvalidArgumentError(path + ":" + std::to_string(number) +
                                    ": a section header must end with ']'");
      }
      current = Trim(t.substr(1, t.size() - 2));
      continue;
    }
    const size_t eq = t.find('=');
    if (eq == std::string::npos) {
      // Nested settings ("s3 =" followed by indented lines) are indented.
      if (line[0] == ' ' || line[0] == '\t') continue;
      return InvalidArgumentError(path + ":" + std::to_string(number) +
                                  ": expected 'name = value' or '[section]'");
    }
    if (current == wanted && line[0] != ' ' && line[0] != '\t') {
      out[Trim(t.substr(0, eq))] = Trim(t.substr(eq + 1));
    }
  }
  return out;
}

std::string Home() { return Env("HOME"); }

void FillIfEmpty(std::string* field, const std::string& value) {
  if (field->empty()) *field = value;
}

// A positive integer from environment variable `name`, if set.
Status PositiveFromEnv(const char* name, const char* unit, uint64_t* out) {
  const std::string v = Env(name);
  if (v.empty()) return OkStatus();
  char* end = nullptr;
  const unsigned long long n = std::strtoull(v.c_str(), &end, 10);
  if (*end != '\0' || n == 0 || v[0] == '-' || v[0] == '+' || v[0] == ' ') {
    return InvalidArgumentError(std::string(name) + "='" + v + "': expected a positive number of " +
                                unit);
  }
  *out = n;
  return OkStatus();
}

}  // namespace

Result<S3Options> ResolveS3Options(S3Options o) {
  FillIfEmpty(&o.profile, Env("AWS_PROFILE"));
  FillIfEmpty(&o.profile, "default");
  // Keys come as a pair: from the environment only if both are set there.
  if (o.access_key_id.empty() && o.secret_access_key.empty() && !Env("AWS_ACCESS_KEY_ID").empty() &&
      !Env("AWS_SECRET_ACCESS_KEY").empty()) {
    o.access_key_id = Env("AWS_ACCESS_KEY_ID");
    o.secret_access_key = Env("AWS_SECRET_ACCESS_KEY");
    FillIfEmpty(&o.session_token, Env("AWS_SESSION_TOKEN"));
  }
  FillIfEmpty(&o.region, Env("AWS_REGION"));
  FillIfEmpty(&o.region, Env("AWS_DEFAULT_REGION"));
  FillIfEmpty(&o.endpoint, Env("AWS_ENDPOINT_URL_S3"));
  FillIfEmpty(&o.endpoint, Env("AWS_ENDPOINT_URL"));
  FillIfEmpty(&o.ca_bundle, Env("AWS_CA_BUNDLE"));

  std::string credentials_file = Env("AWS_SHARED_CREDENTIALS_FILE");
  std::string config_file = Env("AWS_CONFIG_FILE");
  if (credentials_file.empty() && !Home().empty()) credentials_file = Home() + "/.aws/credentials";
  if (config_file.empty() && !Home().empty()) config_file = Home() + "/.aws/config";
  SP_ASSIGN_OR_RETURN(Section creds, ReadIniSection(credentials_file, o.profile));
  SP_ASSIGN_OR_RETURN(Section config,
                      ReadIniSection(config_file, o.profile == "default" ? std::string("default")
                                                                         : "profile " + o.profile));
  for (const Section* s : {&creds, &config}) {
    if (o.access_key_id.empty() && o.secret_access_key.empty() &&
        s->contains("aws_access_key_id")) {
      o.access_key_id = s->at("aws_access_key_id");
      o.secret_access_key =
          s->contains("aws_secret_access_key") ? s->at("aws_secret_access_key") : "";
      if (s->contains("aws_session_token"))
        FillIfEmpty(&o.session_token, s->at("aws_session_token"));
    }
  }
  if (config.contains("region")) FillIfEmpty(&o.region, config.at("region"));
  if (config.contains("endpoint_url")) FillIfEmpty(&o.endpoint, config.at("endpoint_url"));
  if (config.contains("ca_bundle")) FillIfEmpty(&o.ca_bundle, config.at("ca_bundle"));
  FillIfEmpty(&o.region, "us-east-1");
  while (!o.endpoint.empty() && o.endpoint.back() == '/') o.endpoint.pop_back();
  if (!o.endpoint.empty() && !o.endpoint.starts_with("http://") &&
      !o.endpoint.starts_with("https://")) {
    return InvalidArgumentError("S3 endpoint '" + o.endpoint +
                                "' must start with http:// or https://");
  }
  if (o.access_key_id.empty() || o.secret_access_key.empty()) {
    return InvalidArgumentError(
        "no S3 credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or profile '" +
        o.profile + "' in " + credentials_file + " or " + config_file);
  }
  // Unset (0): the environment, else the default; a value set wins.
  if (o.read_request_bytes == 0) {
    SP_RETURN_IF_ERROR(PositiveFromEnv("SHARDPOINT_S3_READ_BYTES", "bytes", &o.read_request_bytes));
    if (o.read_request_bytes == 0) o.read_request_bytes = uint64_t{16} << 20;
  }
  if (o.lease_ms == 0) {
    uint64_t lease_s = 0;
    SP_RETURN_IF_ERROR(PositiveFromEnv("SHARDPOINT_S3_LEASE_SECONDS", "seconds", &lease_s));
    if (lease_s > 86400) {
      return InvalidArgumentError("SHARDPOINT_S3_LEASE_SECONDS=" + std::to_string(lease_s) +
                                  ": at most 86400 (a day)");
    }
    o.lease_ms = lease_s > 0 ? static_cast<int>(lease_s * 1000) : 60000;
  }
  if (o.lease_ms < 0) {
    return InvalidArgumentError("S3 lease " + std::to_string(o.lease_ms) + " ms is negative");
  }
  if (o.part_size < (uint64_t{5} << 20) || o.part_size > (uint64_t{5} << 30)) {
    return InvalidArgumentError("S3 part size " + std::to_string(o.part_size) +
                                " bytes is outside [5 MiB, 5 GiB]");
  }
  for (const auto& [name, value] :
       {std::pair<const char*, int>{"max_connections", o.max_connections},
        {"parts_in_flight", o.parts_in_flight},
        {"max_attempts", o.max_attempts}}) {
    if (value < 1) {
      return InvalidArgumentError("S3 " + std::string(name) + " " + std::to_string(value) +
                                  " must be >= 1");
    }
  }
  return o;
}

std::string DescribeS3Options(const S3Options& o) {
  const char* addressing = o.addressing == S3Addressing::kPath            ? "path"
                           : o.addressing == S3Addressing::kVirtualHosted ? "virtual-hosted"
                                                                          : "auto";
  return "endpoint " + (o.endpoint.empty() ? std::string("AWS") : o.endpoint) + ", region " +
         o.region + ", addressing " + addressing + ", access key id " + o.access_key_id;
}

}  // namespace shardpoint::internal_objstore
