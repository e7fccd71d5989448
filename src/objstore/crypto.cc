#include "src/objstore/crypto.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <cstdint>

#include "src/objstore/md5_shared.h"

namespace shardpoint::internal_objstore {
namespace {

std::string Digest(const EVP_MD* md, std::string_view data) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  // EVP_Digest fails only on allocation failure; an empty digest then makes
  // every signature wrong, which the server reports.
  if (EVP_Digest(data.data(), data.size(), out, &n, md, nullptr) != 1) return std::string();
  return std::string(reinterpret_cast<const char*>(out), n);
}

// MD5 through the shared engine: concurrent parts hashed together in lanes.
std::string Md5(std::string_view data) {
  unsigned char digest[16];
  SharedMd5(data.data(), data.size(), digest);
  return std::string(reinterpret_cast<const char*>(digest), 16);
}

}  // namespace

std::string HexEncode(std::string_view bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s;
  s.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    s.push_back(kHex[c >> 4]);
    s.push_back(kHex[c & 15]);
  }
  return s;
}

std::string Sha256(std::string_view data) { return Digest(EVP_sha256(), data); }

std::string Sha256Hex(std::string_view data) { return HexEncode(Sha256(data)); }

std::string HmacSha256(std::string_view key, std::string_view data) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  if (HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
           reinterpret_cast<const unsigned char*>(data.data()), data.size(), out, &n) == nullptr) {
    return std::string();
  }
  return std::string(reinterpret_cast<const char*>(out), n);
}

std::string Base64Encode(std::string_view bytes) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string s;
  s.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    const uint32_t v = (uint32_t{static_cast<unsigned char>(bytes[i])} << 16) |
                       (uint32_t{static_cast<unsigned char>(bytes[i + 1])} << 8) |
                       uint32_t{static_cast<unsigned char>(bytes[i + 2])};
    for (int k = 3; k >= 0; --k) s.push_back(kAlphabet[(v >> (6 * k)) & 63]);
  }
  const size_t rest = bytes.size() - i;
  if (rest > 0) {
    uint32_t v = uint32_t{static_cast<unsigned char>(bytes[i])} << 16;
    if (rest == 2) v |= uint32_t{static_cast<unsigned char>(bytes[i + 1])} << 8;
    s.push_back(kAlphabet[(v >> 18) & 63]);
    s.push_back(kAlphabet[(v >> 12) & 63]);
    s.push_back(rest == 2 ? kAlphabet[(v >> 6) & 63] : '=');
    s.push_back('=');
  }
  return s;
}

std::string Md5Base64(std::string_view data) { return Base64Encode(Md5(data)); }

std::string Md5Hex(std::string_view data) { return HexEncode(Md5(data)); }

}  // namespace shardpoint::internal_objstore
