// An S3 client on libcurl: the object operations shardpoint's object-store
// storage needs, each one signed (SigV4), retried and typed.
//
// Connections: a pool of up to max_connections libcurl easy handles, each
// keeping its connection open between requests (HTTP keep-alive); a request
// takes a handle, waiting while all are busy, so at most max_connections
// requests are in flight per client. Thread-safe: call from any number of
// threads.
//
// Errors: every failure names the operation, s3://bucket/key and the last
// HTTP status and S3 error code. 404 (NoSuchKey, NoSuchBucket, NoSuchUpload)
// is NotFound; 403 (AccessDenied, InvalidAccessKeyId, SignatureDoesNotMatch)
// is IOError "permission denied", as POSIX EACCES is; 412 on a conditional
// PUT is FailedPrecondition. 5xx, 429, 408, timeouts, stalls and resets are
// retried with exponential backoff and full jitter, within max_attempts and
// retry_total_ms (S3Options); then IOError with the attempts made.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "shardpoint/status.h"
#include "src/objstore/s3_options.h"

namespace shardpoint::internal_objstore {

struct S3ObjectInfo {
  std::string key;
  uint64_t size = 0;
  std::string etag;  // without quotes
};

// A multipart upload begun and neither completed nor aborted.
struct S3OpenUpload {
  std::string key;
  std::string upload_id;
};

struct S3Listing {
  std::vector<S3ObjectInfo> objects;         // keys under the prefix (after the delimiter rule)
  std::vector<std::string> common_prefixes;  // with a delimiter: "sub/" groups, full prefixes
};

// Counters of what a client sent, for tests and benchmarks.
struct S3ClientStats {
  uint64_t requests = 0;  // HTTP requests made, retries included
  uint64_t retries = 0;
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
};

class S3Client {
 public:
  // REQUIRES: options resolved (ResolveS3Options).
  static Result<std::unique_ptr<S3Client>> Make(const S3Options& options);
  ~S3Client();
  S3Client(const S3Client&) = delete;
  S3Client& operator=(const S3Client&) = delete;

  const S3Options& options() const { return options_; }
  S3ClientStats stats() const;

  Status CreateBucket(const std::string& bucket);
  // PUT of the whole object with Content-MD5. if_none_match: created only if
  // no object has the key (If-None-Match: *), else FailedPrecondition; a
  // retry that finds its own earlier attempt committed (412, and the stored
  // ETag is this body's MD5) succeeds.
  Status PutObject(const std::string& bucket, const std::string& key, std::string_view data,
                   bool if_none_match = false);
  // Reads exactly n bytes at offset into dst (a ranged GET); DataLoss naming
  // the object and range if the object is shorter.
  Status GetRange(const std::string& bucket, const std::string& key, uint64_t offset, size_t n,
                  void* dst);
  // The whole object: one GET if it is at most 1 MiB (the response gives the
  // size), else two (the rest only if its ETag is unchanged, else
  // FailedPrecondition). NotFound naming it if there is none.
  Result<std::string> GetObject(const std::string& bucket, const std::string& key);
  Result<S3ObjectInfo> HeadObject(const std::string& bucket, const std::string& key);
  // Every object under `prefix` (all pages, following continuation tokens).
  // With a delimiter ("/"), keys below the next delimiter are grouped into
  // common_prefixes, as a directory listing.
  // max_keys: per page (S3's cap and default is 1000; tests page with less).
  Result<S3Listing> List(const std::string& bucket, const std::string& prefix,
                         const std::string& delimiter = "", int max_keys = 1000);
  // OK if the key did not exist (S3 semantics).
  Status DeleteObject(const std::string& bucket, const std::string& key);

  // Multipart uploads (s3_multipart.h drives them).
  Result<std::string> CreateMultipartUpload(const std::string& bucket, const std::string& key);
  // Returns the part's ETag. part_number in [1, 10000].
  Result<std::string> UploadPart(const std::string& bucket, const std::string& key,
                                 const std::string& upload_id, int part_number,
                                 std::string_view data);
  Status CompleteMultipartUpload(const std::string& bucket, const std::string& key,
                                 const std::string& upload_id,
                                 const std::vector<std::string>& etags);
  Status AbortMultipartUpload(const std::string& bucket, const std::string& key,
                              const std::string& upload_id);
  // The multipart uploads begun and neither completed nor aborted under
  // `prefix` (every page of `max_uploads`): what an abandoned save would leave.
  Result<std::vector<S3OpenUpload>> ListMultipartUploads(const std::string& bucket,
                                                         const std::string& prefix,
                                                         int max_uploads = 1000);

  struct Request;
  struct Response;
  struct Handle;

 private:
  explicit S3Client(S3Options options);
  Result<Response> Send(const Request& request);
  Result<Response> SendOnce(Handle* handle, const Request& request);
  std::unique_ptr<Handle> Acquire();
  void Release(std::unique_ptr<Handle> handle);

  struct State;
  const S3Options options_;
  std::unique_ptr<State> state_;
};

}  // namespace shardpoint::internal_objstore
