// AWS Signature Version 4 (header form), as S3 and its compatibles check it.
//
// SignV4 builds the canonical request (method, URI-encoded path, sorted
// query, lower-cased trimmed headers, the payload's SHA-256), the string to
// sign (algorithm, time, scope, hash of the canonical request) and the
// signature (HMAC-SHA256 chained over date, region, service and
// "aws4_request" from "AWS4" + secret). The path is encoded once, as S3
// wants: no double encoding, no dot-segment normalization. Proven against
// AWS's published SigV4 test-suite vectors (sigv4_test.cc). Pure, thread-safe.
#pragma once

#include <ctime>
#include <string>
#include <utility>
#include <vector>

namespace shardpoint::internal_objstore {

struct SigV4Credentials {
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;  // empty: none (else sent as x-amz-security-token)
};

struct SigV4Request {
  std::string method;  // "GET", "PUT", ...
  // The path as sent, already URI-encoded ("/bucket/a%20b"); empty means "/".
  std::string encoded_path;
  // Query parameters, not encoded; a name with an empty value is "name=".
  std::vector<std::pair<std::string, std::string>> query;
  // Headers to sign, any case, in any order; repeated names are joined with
  // ",". Must include "host". SignV4 signs x-amz-date (and the security
  // token) itself; the caller adds SigV4Result::add_headers to the request.
  std::vector<std::pair<std::string, std::string>> headers;
  // Lower-case hex SHA-256 of the body, or "UNSIGNED-PAYLOAD".
  std::string payload_sha256;
};

struct SigV4Result {
  std::string canonical_request;
  std::string string_to_sign;
  std::string signature;      // lower-case hex
  std::string authorization;  // the Authorization header's value
  // Headers the signer added that the request must carry (x-amz-date, and
  // x-amz-security-token with a session token).
  std::vector<std::pair<std::string, std::string>> add_headers;
};

// `amz_date` is the request time as "YYYYMMDD'T'HHMMSS'Z'" (AmzDate).
SigV4Result SignV4(const SigV4Request& request, const SigV4Credentials& credentials,
                   const std::string& region, const std::string& service,
                   const std::string& amz_date);

// `t` as "YYYYMMDD'T'HHMMSS'Z'" in UTC.
std::string AmzDate(std::time_t t);

// RFC 3986 percent-encoding as SigV4 wants: unreserved characters
// (A-Z a-z 0-9 - . _ ~) stay, everything else is %XX (upper-case); '/' stays
// where !encode_slash (object keys in paths).
std::string UriEncode(const std::string& s, bool encode_slash);

// The canonical query string: encoded names and values, sorted by name then
// value, joined by '&'. Also what the client sends, so the two never differ.
std::string CanonicalQuery(const std::vector<std::pair<std::string, std::string>>& query);

}  // namespace shardpoint::internal_objstore
