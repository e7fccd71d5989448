// Hashes and encodings the S3 client needs, on OpenSSL's libcrypto: SHA-256
// and HMAC-SHA256 for SigV4 signing; MD5 for Content-MD5 (md5_shared.h:
// concurrent calls hashed together in AVX2 lanes); hex and base64.
// Pure functions, thread-safe.
#pragma once

#include <string>
#include <string_view>

namespace shardpoint::internal_objstore {

// Lower-case hex of bytes.
std::string HexEncode(std::string_view bytes);
// The 32 raw bytes of SHA-256(data).
std::string Sha256(std::string_view data);
// Lower-case hex of SHA-256(data) (64 digits).
std::string Sha256Hex(std::string_view data);
// The 32 raw bytes of HMAC-SHA256(key, data).
std::string HmacSha256(std::string_view key, std::string_view data);
// Base64 of the 16 raw bytes of MD5(data): a Content-MD5 header value.
std::string Md5Base64(std::string_view data);
// Lower-case hex of MD5(data): a single-part object's ETag.
std::string Md5Hex(std::string_view data);
// Standard base64 with padding.
std::string Base64Encode(std::string_view bytes);

}  // namespace shardpoint::internal_objstore
