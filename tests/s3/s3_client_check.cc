// The S3 client against a real Ceph radosgw (tests/s3/radosgw.sh, started by
// the ctest fixture s3_server): every operation, multipart uploads around the
// part-size boundary, conditional creates, the typed errors, and faults
// injected between client and server by a TCP proxy.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "src/objstore/s3_client.h"
#include "src/objstore/s3_storage.h"
#include "src/objstore/s3_upload.h"
#include "tests/s3/fault_proxy.h"
#include "tests/s3/s3_server.h"
#include "tests/testing/seeded_bytes.h"

namespace shardpoint::internal_objstore {
namespace {

using testing::FaultProxy;

constexpr char kBucket[] = "client-check";
constexpr uint64_t kPart = uint64_t{5} << 20;  // S3's smallest part

S3Options Options() {
  S3Options o;
  o.part_size = kPart;
  o.parts_in_flight = 2;
  o.max_connections = 4;
  o.jitter_seed = 7;
  Result<S3Options> r = ResolveS3Options(o);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return *r;
}

std::unique_ptr<S3Client> Client(S3Options o = Options()) {
  Result<std::unique_ptr<S3Client>> c = S3Client::Make(o);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return std::move(*c);
}

std::string Bytes(size_t n, uint64_t seed) { return testing::SeededBytes(n, seed); }

class S3ClientCheck : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { ASSERT_TRUE(Client()->CreateBucket(kBucket).ok()); }
};

TEST_F(S3ClientCheck, PutGetRangeHeadListDelete) {
  auto c = Client();
  const std::string data = Bytes(100000, 1);
  const std::string key = "ops/a b+c/\xc3\xa9t\xc3\xa9.bin";  // encoded in the path
  ASSERT_TRUE(c->PutObject(kBucket, key, data).ok());
  Result<S3ObjectInfo> head = c->HeadObject(kBucket, key);
  ASSERT_TRUE(head.ok()) << head.status().ToString();
  EXPECT_EQ(head->size, data.size());
  std::string part(1000, '\0');
  ASSERT_TRUE(c->GetRange(kBucket, key, 12345, part.size(), part.data()).ok());
  EXPECT_EQ(part, data.substr(12345, 1000));
  Result<std::string> all = c->GetObject(kBucket, key);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(*all, data);
  // Past the end: DataLoss naming the object and range.
  Status past = c->GetRange(kBucket, key, data.size() - 10, 20, part.data());
  EXPECT_EQ(past.code(), StatusCode::kDataLoss) << past.ToString();
  EXPECT_NE(past.message().find("[99990, 100010)"), std::string::npos) << past.ToString();
  Result<S3Listing> list = c->List(kBucket, "ops/", "/");
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->common_prefixes.size(), 1u);
  EXPECT_EQ(list->common_prefixes[0], "ops/a b+c/");
  ASSERT_TRUE(c->DeleteObject(kBucket, key).ok());
  EXPECT_EQ(c->HeadObject(kBucket, key).status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(c->DeleteObject(kBucket, key).ok());  // absent: fine
}

// Virtual-hosted addressing: the bucket in the Host name, the key alone in
// the path. radosgw.sh names the gateway `localhost` (rgw dns name) and curl
// resolves every *.localhost to the loopback, so "client-check.localhost"
// reaches it without DNS; a client that put the bucket in the path too, or
// not in the Host, would write or read another key.
TEST_F(S3ClientCheck, VirtualHostedAddressingPutsTheBucketInTheHost) {
  S3Options o = Options();
  const size_t at = o.endpoint.find("127.0.0.1");
  ASSERT_NE(at, std::string::npos) << o.endpoint;
  o.endpoint.replace(at, 9, "localhost");
  o.addressing = S3Addressing::kVirtualHosted;
  auto vc = Client(o);
  const std::string data = Bytes(70000, 3);
  ASSERT_TRUE(vc->PutObject(kBucket, "vhost/a b.bin", data).ok());
  Result<std::string> got = Client()->GetObject(kBucket, "vhost/a b.bin");  // path style
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, data);
  std::string part(100, '\0');
  ASSERT_TRUE(vc->GetRange(kBucket, "vhost/a b.bin", 500, part.size(), part.data()).ok());
  EXPECT_EQ(part, data.substr(500, 100));
  Result<S3Listing> list = vc->List(kBucket, "vhost/", "/");
  ASSERT_TRUE(list.ok()) << list.status().ToString();
  ASSERT_EQ(list->objects.size(), 1u);
  EXPECT_EQ(list->objects[0].key, "vhost/a b.bin");
  ASSERT_TRUE(vc->DeleteObject(kBucket, "vhost/a b.bin").ok());
}

TEST_F(S3ClientCheck, ListFollowsContinuationTokens) {
  auto c = Client();
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(c->PutObject(kBucket, "page/" + std::to_string(i), "x").ok());
  }
  const uint64_t before = c->stats().requests;
  Result<S3Listing> list = c->List(kBucket, "page/", "", 2);
  ASSERT_TRUE(list.ok()) << list.status().ToString();
  ASSERT_EQ(list->objects.size(), 5u);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(list->objects[i].key, "page/" + std::to_string(i));
  EXPECT_EQ(c->stats().requests - before, 3u);  // pages of 2, 2, 1
}

// Open uploads are listed across pages (key and upload-id markers), as
// objects are across continuation tokens; two uploads of one key included.
TEST_F(S3ClientCheck, ListMultipartUploadsFollowsMarkers) {
  auto c = Client();
  std::vector<std::pair<std::string, std::string>> open;
  for (const char* key : {"uploads/a", "uploads/b", "uploads/b", "uploads/c", "uploads/d"}) {
    Result<std::string> id = c->CreateMultipartUpload(kBucket, key);
    ASSERT_TRUE(id.ok()) << id.status().ToString();
    open.emplace_back(key, *id);
  }
  const uint64_t before = c->stats().requests;
  Result<std::vector<internal_objstore::S3OpenUpload>> listed =
      c->ListMultipartUploads(kBucket, "uploads/", 2);
  const uint64_t requests = c->stats().requests - before;
  for (const auto& [key, id] : open) EXPECT_TRUE(c->AbortMultipartUpload(kBucket, key, id).ok());
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  std::vector<std::pair<std::string, std::string>> got;
  for (const auto& u : *listed) got.emplace_back(u.key, u.upload_id);
  std::sort(got.begin(), got.end());
  std::sort(open.begin(), open.end());
  EXPECT_EQ(got, open);     // every key with its upload id, the two of "uploads/b" included
  EXPECT_EQ(requests, 3u);  // pages of 2, 2, 1
  Result<std::vector<internal_objstore::S3OpenUpload>> none =
      c->ListMultipartUploads(kBucket, "uploads/", 2);
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_TRUE(none->empty());
}

TEST_F(S3ClientCheck, ConditionalCreateRefusesTheSecond) {
  auto c = Client();
  const std::string key = "cond/manifest";
  c->DeleteObject(kBucket, key).IgnoreError();
  ASSERT_TRUE(c->PutObject(kBucket, key, "first", true).ok());
  Status second = c->PutObject(kBucket, key, "second", true);
  EXPECT_EQ(second.code(), StatusCode::kFailedPrecondition) << second.ToString();
  EXPECT_NE(second.message().find("412"), std::string::npos) << second.ToString();
  EXPECT_EQ(*c->GetObject(kBucket, key), "first");
}

TEST_F(S3ClientCheck, MultipartAroundThePartBoundary) {
  auto c = Client();
  struct Case {
    uint64_t size;
    int parts;  // 0: a single PUT
  };
  for (Case k : {Case{0, 0}, Case{kPart - 1, 0}, Case{kPart, 0}, Case{kPart + 1, 2},
                 Case{2 * kPart + 1, 3}}) {
    const std::string data = Bytes(k.size, k.size);
    const std::string key = "mp/" + std::to_string(k.size);
    S3Upload up(c.get(), kBucket, key);
    // Uneven appends, so parts are cut inside them.
    for (size_t off = 0; off < data.size();) {
      const size_t n = std::min<size_t>(data.size() - off, 777777);
      ASSERT_TRUE(up.Append(data.data() + off, n).ok());
      off += n;
    }
    ASSERT_TRUE(up.Finish().ok()) << k.size;
    EXPECT_EQ(up.parts(), k.parts) << k.size;
    Result<std::string> back = c->GetObject(kBucket, key);
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_TRUE(*back == data) << k.size;
  }
}

// Six parts with two in flight: the part buffers are recycled (at most
// parts_in_flight + 2 allocated: two parts filling, the others sending), not
// one fresh buffer per part; bit for bit.
TEST_F(S3ClientCheck, PartBuffersAreRecycled) {
  auto c = Client();
  const std::string data = Bytes(5 * kPart + 1, 6);
  S3Upload up(c.get(), kBucket, "mp/recycled");
  for (size_t off = 0; off < data.size();) {
    const size_t n = std::min<size_t>(data.size() - off, 3 << 20);
    ASSERT_TRUE(up.Append(data.data() + off, n).ok());
    off += n;
  }
  ASSERT_TRUE(up.Finish().ok());
  EXPECT_EQ(up.parts(), 6);
  EXPECT_LE(up.buffers_allocated(), c->options().parts_in_flight + 2);
  EXPECT_TRUE(*c->GetObject(kBucket, "mp/recycled") == data);
}

// Opening a file costs no request (a load makes no HEAD per data file): a
// read is one ranged GET, Size() one HEAD, and a missing object is NotFound
// at its first read, naming it.
TEST_F(S3ClientCheck, OpeningAFileCostsNoRequest) {
  S3Storage storage(Client());
  const std::string data = Bytes(3000, 12);
  ASSERT_TRUE(storage.client()->PutObject(kBucket, "open/a", data).ok());
  const uint64_t before = storage.client()->stats().requests;
  Result<std::unique_ptr<ReadableFile>> f =
      storage.NewReadableFile(std::string("s3://") + kBucket + "/open/a");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(storage.client()->stats().requests, before);
  std::string got(1000, '\0');
  ASSERT_TRUE((*f)->ReadAt(2000, got.size(), got.data()).ok());
  EXPECT_EQ(got, data.substr(2000));
  EXPECT_EQ(storage.client()->stats().requests, before + 1);
  EXPECT_EQ(*(*f)->Size(), data.size());
  EXPECT_EQ(storage.client()->stats().requests, before + 2);
  Status beyond = (*f)->ReadAt(2999, 2, got.data());  // the size is known now
  EXPECT_EQ(beyond.code(), StatusCode::kDataLoss) << beyond.ToString();
  Result<std::unique_ptr<ReadableFile>> missing =
      storage.NewReadableFile(std::string("s3://") + kBucket + "/open/missing");
  ASSERT_TRUE(missing.ok()) << missing.status().ToString();
  Status s = (*missing)->ReadAt(0, 10, got.data());
  EXPECT_EQ(s.code(), StatusCode::kNotFound) << s.ToString();
  EXPECT_NE(s.message().find("s3://client-check/open/missing"), std::string::npos) << s.ToString();
}

// GetObject reads a small object (a manifest, a lease) in one GET, the size
// from its Content-Range; an empty one too; a larger one in two, bit for bit.
TEST_F(S3ClientCheck, GetObjectIsOneRequestUpToOneMiB) {
  auto c = Client();
  const std::string small = Bytes(3000, 21), large = Bytes((size_t{1} << 20) + 5, 22);
  ASSERT_TRUE(c->PutObject(kBucket, "whole/small", small).ok());
  ASSERT_TRUE(c->PutObject(kBucket, "whole/empty", "").ok());
  ASSERT_TRUE(c->PutObject(kBucket, "whole/large", large).ok());
  uint64_t before = c->stats().requests;
  EXPECT_TRUE(*c->GetObject(kBucket, "whole/small") == small);
  EXPECT_EQ(c->stats().requests, before + 1);
  EXPECT_EQ(*c->GetObject(kBucket, "whole/empty"), "");
  EXPECT_EQ(c->stats().requests, before + 2);
  EXPECT_TRUE(*c->GetObject(kBucket, "whole/large") == large);
  EXPECT_EQ(c->stats().requests, before + 4);
  Result<std::string> missing = c->GetObject(kBucket, "whole/missing");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound) << missing.status().ToString();
  EXPECT_NE(missing.status().message().find("s3://client-check/whole/missing"), std::string::npos)
      << missing.status().ToString();
}

TEST_F(S3ClientCheck, UnfinishedUploadLeavesNothing) {
  auto c = Client();
  {
    S3Upload up(c.get(), kBucket, "mp/abandoned");
    const std::string data = Bytes(kPart + 10, 3);
    ASSERT_TRUE(up.Append(data.data(), data.size()).ok());
  }  // destroyed: aborted
  EXPECT_EQ(c->HeadObject(kBucket, "mp/abandoned").status().code(), StatusCode::kNotFound);
}

TEST_F(S3ClientCheck, WrongCredentialsArePermissionDenied) {
  S3Options o = Options();
  o.secret_access_key = "not-the-secret";
  auto c = Client(o);
  Status s = c->PutObject(kBucket, "denied", "x");
  EXPECT_EQ(s.code(), StatusCode::kIOError) << s.ToString();
  EXPECT_NE(s.message().find("permission denied (HTTP 403"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("s3://client-check/denied"), std::string::npos) << s.ToString();
  EXPECT_EQ(s.message().find("not-the-secret"), std::string::npos);  // never logged
  EXPECT_EQ(c->stats().retries, 0u);                                 // not retried
}

TEST_F(S3ClientCheck, MissingBucketIsNotFound) {
  auto c = Client();
  Status get = c->HeadObject("no-such-bucket-here", "k").status();
  EXPECT_EQ(get.code(), StatusCode::kNotFound) << get.ToString();
  Status put = c->PutObject("no-such-bucket-here", "k", "x");
  EXPECT_EQ(put.code(), StatusCode::kNotFound) << put.ToString();
  EXPECT_NE(put.message().find("NoSuchBucket"), std::string::npos) << put.ToString();
}

TEST_F(S3ClientCheck, RetriesSurviveResetsAndSlowDown) {
  FaultProxy proxy(testing::S3ServerPort());
  S3Options o = Options();
  o.endpoint = proxy.endpoint();
  auto c = Client(o);
  const std::string data = Bytes(kPart + 5, 9);
  proxy.reset_connections = 2;
  proxy.fail_requests = 3;
  S3Upload up(c.get(), kBucket, "faults/retried");
  ASSERT_TRUE(up.Append(data.data(), data.size()).ok());
  Status s = up.Finish();
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_GE(c->stats().retries, 5u);
  EXPECT_EQ(*Client()->GetObject(kBucket, "faults/retried"), data);
}

TEST_F(S3ClientCheck, PersistentSlowDownIsATypedErrorInBoundedTime) {
  FaultProxy proxy(testing::S3ServerPort());
  S3Options o = Options();
  o.endpoint = proxy.endpoint();
  o.max_attempts = 4;
  auto c = Client(o);
  proxy.fail_requests = 1000;
  const auto start = std::chrono::steady_clock::now();
  Status s = c->PutObject(kBucket, "faults/throttled", "x");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_EQ(s.code(), StatusCode::kIOError) << s.ToString();
  EXPECT_NE(s.message().find("HTTP 503 SlowDown"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("after 4 attempts"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("s3://client-check/faults/throttled"), std::string::npos);
}

TEST_F(S3ClientCheck, AServerThatNeverAnswersIsAnErrorNotAHang) {
  FaultProxy proxy(testing::S3ServerPort());
  proxy.black_hole = true;
  S3Options o = Options();
  o.endpoint = proxy.endpoint();
  o.stall_timeout_s = 1;
  o.max_attempts = 2;
  auto c = Client(o);
  const auto start = std::chrono::steady_clock::now();
  Status s = c->HeadObject(kBucket, "faults/none").status();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  EXPECT_EQ(s.code(), StatusCode::kIOError) << s.ToString();
  EXPECT_NE(s.message().find("after 2 attempts"), std::string::npos) << s.ToString();
}

}  // namespace
}  // namespace shardpoint::internal_objstore

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (argc < 2) {
    std::cerr << "usage: s3_client_check SERVER_DIR\n";
    return 2;
  }
  if (!shardpoint::testing::LoadS3ServerEnv(argv[1])) return 77;
  return RUN_ALL_TESTS();
}
