// SigV4 against AWS's published test-suite vectors (the aws-sig-v4-test-suite:
// credentials AKIDEXAMPLE, region us-east-1, service "service", time
// 20150830T123600Z). radosgw 16.2 still accepts SigV2, so only these prove
// the signer.
#include "src/objstore/sigv4.h"

#include <gtest/gtest.h>

#include "src/objstore/crypto.h"

namespace shardpoint::internal_objstore {
namespace {

const SigV4Credentials kCreds{"AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", ""};
constexpr char kDate[] = "20150830T123600Z";
constexpr char kEmptySha[] = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
constexpr char kScope[] = "Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request";

SigV4Result Sign(SigV4Request r) {
  r.headers.emplace_back("Host", "example.amazonaws.com");
  r.headers.emplace_back("X-Amz-Date", kDate);
  if (r.payload_sha256.empty()) r.payload_sha256 = kEmptySha;
  return SignV4(r, kCreds, "us-east-1", "service", kDate);
}

TEST(SigV4, GetVanilla) {
  SigV4Result s = Sign({"GET", "/", {}, {}, ""});
  EXPECT_EQ(
      s.canonical_request,
      "GET\n/\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\n" +
          std::string(kEmptySha));
  EXPECT_EQ(s.string_to_sign,
            "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\n"
            "bb579772317eb040ac9ed261061d46c1f17a8133879d6129b6e1c25292927e63");
  EXPECT_EQ(s.signature, "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31");
  EXPECT_EQ(s.authorization, std::string("AWS4-HMAC-SHA256 ") + kScope +
                                 ", SignedHeaders=host;x-amz-date, Signature=" + s.signature);
}

TEST(SigV4, GetVanillaQueryOrderKeyCase) {
  SigV4Result s = Sign({"GET", "/", {{"Param2", "value2"}, {"Param1", "value1"}}, {}, ""});
  EXPECT_EQ(s.canonical_request,
            "GET\n/\nParam1=value1&Param2=value2\nhost:example.amazonaws.com\n"
            "x-amz-date:20150830T123600Z\n\nhost;x-amz-date\n" +
                std::string(kEmptySha));
  EXPECT_EQ(s.string_to_sign,
            "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\n"
            "816cd5b414d056048ba4f7c5386d6e0533120fb1fcfa93762cf0fc39e2cf19e0");
  EXPECT_EQ(s.signature, "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500");
}

TEST(SigV4, PostXWwwFormUrlencoded) {
  const std::string body = "Param1=value1";
  SigV4Result s = Sign(
      {"POST", "/", {}, {{"Content-Type", "application/x-www-form-urlencoded"}}, Sha256Hex(body)});
  EXPECT_EQ(s.canonical_request,
            "POST\n/\n\ncontent-type:application/x-www-form-urlencoded\n"
            "host:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\n"
            "content-type;host;x-amz-date\n"
            "9095672bbd1f56dfc5b65f3e153adc8731a4a654192329106275f4c7b24d0b6e");
  EXPECT_EQ(s.string_to_sign,
            "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\n"
            "42a5e5bb34198acb3e84da4f085bb7927f2bc277ca766e6d19c73c2154021281");
  EXPECT_EQ(s.signature, "ff11897932ad3f4e8b18135d722051e5ac45fc38421b1da7b9d196a0fe09473a");
}

// Signatures only, for the cases that exercise one canonicalization rule each.
TEST(SigV4, SuiteSignatures) {
  struct Case {
    const char* name;
    SigV4Request request;
    const char* signature;
  };
  const Case cases[] = {
      {"post-vanilla",
       {"POST", "/", {}, {}, ""},
       "5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b"},
      {"post-vanilla-query",
       {"POST", "/", {{"Param1", "value1"}}, {}, ""},
       "28038455d6de14eafc1f9222cf5aa6f1a96197d7deb8263271d420d138af7f11"},
      {"post-header-key-case",
       {"POST", "/", {}, {{"MY-HEADER1", "value1"}}, ""},
       "c5410059b04c1ee005303aed430f6e6645f61f4dc9e1461ec8f8916fdf18852c"},
      {"post-header-value-case",
       {"POST", "/", {}, {{"My-Header1", "VALUE1"}}, ""},
       "cdbc9802e29d2942e5e10b5bccfdd67c5f22c7c4e8ae67b53629efa58b974b7d"},
      {"get-header-value-trim",
       {"GET", "/", {}, {{"My-Header1", " value1"}, {"My-Header2", "\"a   b   c\""}}, ""},
       "acc3ed3afb60bb290fc8d2dd0098b9911fcaa05412b367055dee359757a9c736"},
      {"get-header-key-duplicate",
       {"GET",
        "/",
        {},
        {{"My-Header1", "value2"}, {"My-Header1", "value2"}, {"My-Header1", "value1"}},
        ""},
       "c9d5ea9f3f72853aea855b47ea873832890dbdd183b4468f858259531a5138ea"},
      {"get-unreserved",
       {"GET",
        UriEncode("/-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz", false),
        {},
        {},
        ""},
       "07ef7494c76fa4850883e2b006601f940f8a34d404d0cfa977f52a65bbf5f24f"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(Sign(c.request).signature, c.signature) << c.name;
  }
}

TEST(SigV4, SessionTokenIsSignedAndAdded) {
  SigV4Credentials creds = kCreds;
  creds.session_token = "TOKEN/+=";
  SigV4Request r{"GET", "/", {}, {{"host", "example.amazonaws.com"}}, kEmptySha};
  SigV4Result s = SignV4(r, creds, "us-east-1", "service", kDate);
  EXPECT_NE(s.canonical_request.find("x-amz-security-token:TOKEN/+=\n"), std::string::npos);
  EXPECT_NE(s.authorization.find("SignedHeaders=host;x-amz-date;x-amz-security-token"),
            std::string::npos);
  ASSERT_EQ(s.add_headers.size(), 2u);
  EXPECT_EQ(s.add_headers[1].second, "TOKEN/+=");
  // The secret never appears in what is sent or logged.
  EXPECT_EQ(s.authorization.find(kCreds.secret_access_key), std::string::npos);
}

TEST(SigV4, UriEncodeAndDate) {
  EXPECT_EQ(UriEncode("a b/c+d~", false), "a%20b/c%2Bd~");
  EXPECT_EQ(UriEncode("a b/c", true), "a%20b%2Fc");
  EXPECT_EQ(UriEncode("\xe1\x88\xb4", true), "%E1%88%B4");
  EXPECT_EQ(AmzDate(1440938160), "20150830T123600Z");
  EXPECT_EQ(CanonicalQuery({{"uploads", ""}, {"a", "x y"}}), "a=x%20y&uploads=");
}

TEST(Crypto, KnownDigests) {
  EXPECT_EQ(Sha256Hex(""), kEmptySha);
  EXPECT_EQ(Md5Base64(""), "1B2M2Y8AsgTpgAmY7PhCfg==");
  // RFC 4648 section 10.
  EXPECT_EQ(Base64Encode("f"), "Zg==");
  EXPECT_EQ(Base64Encode("fo"), "Zm8=");
  EXPECT_EQ(Base64Encode("foo"), "Zm9v");
  EXPECT_EQ(Base64Encode("foobar"), "Zm9vYmFy");
  // RFC 4231 test case 2.
  EXPECT_EQ(HexEncode(HmacSha256("Jefe", "what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}

}  // namespace
}  // namespace shardpoint::internal_objstore
