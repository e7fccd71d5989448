// The request and response records of S3Client (s3_client.h) and the one
// function that turns a response into a Status. Internal to src/objstore.
#pragma once

#include <curl/curl.h>

#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "shardpoint/status.h"
#include "src/objstore/s3_client.h"

namespace shardpoint::internal_objstore {

struct S3Client::Request {
  std::string op;  // "PutObject", for messages
  std::string method;
  std::string bucket;
  std::string key;  // empty: a bucket-level request
  std::vector<std::pair<std::string, std::string>> query;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string_view body;
  // A 2xx response's body is written here (at most dst_size bytes; more is
  // an error); other bodies go to Response::body.
  char* dst = nullptr;
  size_t dst_size = 0;
};

struct S3Client::Response {
  long status = 0;
  std::string body;
  std::map<std::string, std::string> headers;  // lower-case names
  size_t dst_written = 0;
  CURLcode curl = CURLE_OK;  // a transport failure: status is 0
  std::string curl_error;
  int attempts = 0;
};

struct S3Client::Handle {
  CURL* curl = nullptr;
};

// "s3://bucket/key".
std::string S3Uri(const std::string& bucket, const std::string& key);

// The Status of a final (not retried) response that is not a success:
// NotFound, IOError "permission denied", FailedPrecondition (also an
// https:// endpoint whose certificate is not trusted), or IOError,
// each naming op, object, HTTP status, S3 code and message, and attempts.
Status S3ErrorStatus(const S3Client::Request& request, const S3Client::Response& response);

}  // namespace shardpoint::internal_objstore
