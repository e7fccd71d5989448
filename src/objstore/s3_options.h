// Where an S3 client connects and as whom: endpoint, region, addressing,
// credentials, and the knobs of its requests (connections, part size,
// retries, timeouts).
//
// ResolveS3Options fills what the caller left empty the way the AWS CLI and
// SDKs do, so a user's existing setup works unchanged: explicit options, then
// the environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
// AWS_SESSION_TOKEN, AWS_REGION / AWS_DEFAULT_REGION, AWS_ENDPOINT_URL_S3 /
// AWS_ENDPOINT_URL, AWS_CA_BUNDLE, AWS_PROFILE), then the profile's entries in
// ~/.aws/credentials and ~/.aws/config (AWS_SHARED_CREDENTIALS_FILE,
// AWS_CONFIG_FILE move them). Secrets are never put in a message.
#pragma once

#include <cstdint>
#include <string>

#include "shardpoint/status.h"

namespace shardpoint::internal_objstore {

enum class S3Addressing {
  kAuto,           // virtual-hosted on AWS (no endpoint given), path-style elsewhere
  kPath,           // http://endpoint/bucket/key
  kVirtualHosted,  // http://bucket.endpoint/key
};

struct S3Options {
  // "http://127.0.0.1:7480" or "https://s3.example.com". Empty: AWS,
  // https://s3.<region>.amazonaws.com.
  std::string endpoint;
  std::string region;  // empty: us-east-1
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;
  std::string profile;  // empty: AWS_PROFILE, else "default"
  S3Addressing addressing = S3Addressing::kAuto;
  // PEM file of the certificate authorities an https:// endpoint's
  // certificate must chain to (a private CA). Empty: AWS_CA_BUNDLE, the
  // profile's ca_bundle, else the system's store.
  std::string ca_bundle;

  // Connections kept open and requests in flight at most (a pool of libcurl
  // handles). Default 16.
  int max_connections = 16;
  // Multipart uploads: bytes per part (S3: at least 5 MiB except the last,
  // at most 10000 parts) and parts staged in memory per upload at most.
  uint64_t part_size = uint64_t{16} << 20;
  int parts_in_flight = 4;
  // Loads and verifies read in requests (ranged GETs) of at least this many
  // bytes (src/io/read_size.h): LoadOptions::read_slice_bytes, 1 MiB by
  // default, would cost a round trip per MiB. 0 (unset): the environment
  // variable SHARDPOINT_S3_READ_BYTES (1048576: a GET per MiB), else 16 MiB;
  // a value set here wins over the variable.
  uint64_t read_request_bytes = 0;
  // How long a lock lease (S3Storage::LockFile, CheckpointManager's lock)
  // lasts without renewal: the time a crashed job's lock blocks the next one.
  // 0 (unset): SHARDPOINT_S3_LEASE_SECONDS (1 to 86400), else 60 s; a value
  // set here wins over the variable.
  int lease_ms = 0;
  // Retries of a failed request (5xx, 429, 408, timeouts, resets): at most
  // max_attempts tries in all, backing off exponentially from
  // retry_base_ms with full jitter, and no new try after
  // retry_total_ms since the first.
  int max_attempts = 6;
  int retry_base_ms = 50;
  int retry_total_ms = 30000;
  // A connection is abandoned (and the request retried) when it does not
  // connect within connect_timeout_ms, or moves fewer than 1 KiB/s for
  // stall_timeout_s: a dead server or a dropped connection never hangs.
  int connect_timeout_ms = 5000;
  int stall_timeout_s = 15;
  // Seed of the retry jitter (tests); 0: from the clock.
  uint64_t jitter_seed = 0;
};

// Fills empty fields of `options` from the environment and the AWS files (see
// above). InvalidArgument naming the file and line for a malformed file, or
// when no credentials are found anywhere.
Result<S3Options> ResolveS3Options(S3Options options);

// "debug" text of the options for messages: endpoint, region, addressing,
// the access key id; never the secret or the token.
std::string DescribeS3Options(const S3Options& options);

}  // namespace shardpoint::internal_objstore
