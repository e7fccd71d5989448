#include "src/objstore/sigv4.h"

#include <algorithm>
#include <cctype>
#include <map>

#include "src/objstore/crypto.h"

namespace shardpoint::internal_objstore {
namespace {

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Trims both ends and collapses runs of spaces inside to one, as SigV4's
// canonical headers want.
std::string TrimCollapse(const std::string& v) {
  std::string out;
  bool space = false;
  for (char c : v) {
    if (c == ' ' || c == '\t') {
      space = !out.empty();
      continue;
    }
    if (space) out.push_back(' ');
    space = false;
    out.push_back(c);
  }
  return out;
}

}  // namespace

std::string UriEncode(const std::string& s, bool encode_slash) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size());
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~' ||
        (c == '/' && !encode_slash)) {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

std::string CanonicalQuery(const std::vector<std::pair<std::string, std::string>>& query) {
  std::vector<std::pair<std::string, std::string>> encoded;
  encoded.reserve(query.size());
  for (const auto& [name, value] : query) {
    encoded.emplace_back(UriEncode(name, true), UriEncode(value, true));
  }
  std::sort(encoded.begin(), encoded.end());
  std::string out;
  for (const auto& [name, value] : encoded) {
    if (!out.empty()) out.push_back('&');
    out += name + "=" + value;
  }
  return out;
}

std::string AmzDate(std::time_t t) {
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y%m%dT%H%M%SZ", &tm);
  return buf;
}

SigV4Result SignV4(const SigV4Request& request, const SigV4Credentials& credentials,
                   const std::string& region, const std::string& service,
                   const std::string& amz_date) {
  SigV4Result result;
  result.add_headers.emplace_back("x-amz-date", amz_date);
  if (!credentials.session_token.empty()) {
    result.add_headers.emplace_back("x-amz-security-token", credentials.session_token);
  }
  // Canonical headers: lower-case names, sorted; values trimmed; repeats
  // joined with ',' in the order given.
  std::map<std::string, std::string> headers;
  auto add = [&headers](const std::string& name, const std::string& value) {
    std::string& v = headers[Lower(name)];
    v += (v.empty() ? "" : ",") + TrimCollapse(value);
  };
  for (const auto& [name, value] : request.headers) add(name, value);
  for (const auto& [name, value] : result.add_headers) {
    if (!headers.contains(name)) add(name, value);
  }
  std::string canonical_headers;
  std::string signed_headers;
  for (const auto& [name, value] : headers) {
    canonical_headers += name + ":" + value + "\n";
    signed_headers += (signed_headers.empty() ? "" : ";") + name;
  }
  const std::string path = request.encoded_path.empty() ? "/" : request.encoded_path;
  result.canonical_request = request.method + "\n" + path + "\n" + CanonicalQuery(request.query) +
                             "\n" + canonical_headers + "\n" + signed_headers + "\n" +
                             request.payload_sha256;
  const std::string date = amz_date.substr(0, 8);
  const std::string scope = date + "/" + region + "/" + service + "/aws4_request";
  result.string_to_sign =
      "AWS4-HMAC-SHA256\n" + amz_date + "\n" + scope + "\n" + Sha256Hex(result.canonical_request);
  std::string key = HmacSha256("AWS4" + credentials.secret_access_key, date);
  key = HmacSha256(key, region);
  key = HmacSha256(key, service);
  key = HmacSha256(key, "aws4_request");
  result.signature = HexEncode(HmacSha256(key, result.string_to_sign));
  result.authorization = "AWS4-HMAC-SHA256 Credential=" + credentials.access_key_id + "/" + scope +
                         ", SignedHeaders=" + signed_headers + ", Signature=" + result.signature;
  return result;
}

}  // namespace shardpoint::internal_objstore
