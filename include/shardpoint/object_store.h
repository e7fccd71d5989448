// Per-call settings for object stores (S3 and compatibles): where
// `s3://bucket/key` paths go and as whom, for callers that do not want the
// process-wide default (DefaultStorage(): the AWS environment variables and
// profiles, resolved once). docs/object-store.md.
//
//   shardpoint::ObjectStoreOptions o;
//   o.endpoint = "http://127.0.0.1:7480";
//   o.addressing = "path";
//   auto storage = shardpoint::MakeObjectStoreStorage(o);   // check .ok()
//   shardpoint::SaveOptions so;
//   so.storage = storage->get();     // must outlive the call (or the async save)
//   shardpoint::Save(state, "s3://bucket/run7/iter_0001000", comm, so);
#pragma once

#include <memory>
#include <string>

#include "shardpoint/status.h"
#include "shardpoint/storage.h"

namespace shardpoint {

struct ObjectStoreOptions {
  // "http://host:port" or "https://host". Empty: AWS_ENDPOINT_URL_S3,
  // AWS_ENDPOINT_URL, the profile's endpoint_url, else AWS.
  std::string endpoint;
  // Empty: AWS_REGION, AWS_DEFAULT_REGION, the profile's region, else us-east-1.
  std::string region;
  // "path" (host/bucket/key), "virtual" (bucket.host/key), or empty: virtual
  // on AWS, path with an endpoint.
  std::string addressing;
  // The profile of ~/.aws/credentials and ~/.aws/config to read. Empty:
  // AWS_PROFILE, else "default".
  std::string profile;
  // Explicit credentials; empty: the environment, then the profile.
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;
  // PEM file of the CA(s) an https:// endpoint's certificate must chain to
  // (a private CA). Empty: AWS_CA_BUNDLE, the profile's ca_bundle, else the
  // system's store. An untrusted certificate is FailedPrecondition.
  std::string ca_bundle;
  // Throughput (docs/object-store.md, Tuning); 0 keeps the default.
  // Bytes per uploaded part: 5 MiB to 5 GiB, at most 10000 parts per file
  // (default 16 MiB). Memory per file being written: up to about
  // (6 + 32 MiB / part_size) parts.
  uint64_t part_size = 0;
  // Parts of one file uploading at once (default 4).
  int parts_in_flight = 0;
  // Open connections and requests in flight per storage (default 16).
  int max_connections = 0;
};

// A Storage that sends "s3://" paths to an object store set up from
// `options` (fields left empty are filled as DefaultStorage fills them) and
// every other path to POSIX files, as DefaultStorage does. Owns its
// connections; must outlive every call given it. InvalidArgument naming the
// field for a bad `addressing`, an endpoint that is not http(s)://, a part
// size outside [5 MiB, 5 GiB] or a negative count, or when no credentials
// are found; secrets are never put in a message.
Result<std::unique_ptr<Storage>> MakeObjectStoreStorage(const ObjectStoreOptions& options);

}  // namespace shardpoint
