// The part window of S3 uploads (src/objstore/s3_upload.h) against the real
// radosgw: writes in any order from several threads land in their parts with
// no held copy, writes far ahead are held and placed later, holes below the
// size are zeros, bad writes are typed errors naming the bytes, and a
// storage's uploads reuse one pool of part buffers across files.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <thread>

#include "src/objstore/s3_storage.h"
#include "src/objstore/s3_upload.h"
#include "tests/testing/seeded_bytes.h"

namespace shardpoint::internal_objstore {
namespace {

constexpr char kBucket[] = "upload-check";
constexpr uint64_t kPart = uint64_t{5} << 20;  // S3's smallest part

std::unique_ptr<S3Client> NewClient() {
  S3Options o;
  o.part_size = kPart;
  o.parts_in_flight = 2;
  o.max_connections = 4;
  o.jitter_seed = 11;
  Result<S3Options> r = ResolveS3Options(o);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  Result<std::unique_ptr<S3Client>> c = S3Client::Make(*r);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return std::move(*c);
}

std::string Bytes(size_t n, uint64_t seed) { return testing::SeededBytes(n, seed); }

class S3UploadCheck : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { ASSERT_TRUE(NewClient()->CreateBucket(kBucket).ok()); }
};

// Pieces cut at seeded points, shuffled, written by 4 threads: every byte is
// copied once, into its part (nothing held), and the object is bit for bit.
TEST_F(S3UploadCheck, ShuffledWritesFromThreadsLandInTheirParts) {
  auto c = NewClient();
  const std::string data = Bytes(4 * kPart + 123, 21);
  std::mt19937_64 rng(5);
  std::vector<std::pair<size_t, size_t>> pieces;  // offset, size
  for (size_t off = 0; off < data.size();) {
    const size_t n = std::min<size_t>(data.size() - off, 1 + rng() % (1400 << 10));
    pieces.emplace_back(off, n);
    off += n;
  }
  std::shuffle(pieces.begin(), pieces.end(), rng);
  S3Upload up(c.get(), kBucket, "window/shuffled");
  std::vector<std::thread> threads;
  std::vector<Status> status(4);
  for (size_t t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (size_t i = t; i < pieces.size(); i += 4) {
        Status s = up.WriteAt(pieces[i].first, data.data() + pieces[i].first, pieces[i].second);
        if (!s.ok() && status[t].ok()) status[t] = s;
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const Status& s : status) ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_TRUE(up.Finish().ok());
  EXPECT_EQ(up.parts(), 5);
  EXPECT_EQ(up.spilled_bytes(), 0u);
  EXPECT_LE(up.buffers_allocated(), 5);
  EXPECT_TRUE(*c->GetObject(kBucket, "window/shuffled") == data);
}

// A write 12 parts ahead (beyond the window of 2 + 7 parts) is held, then
// placed; bytes never written below ExtendTo's size are zeros.
TEST_F(S3UploadCheck, FarWritesAreHeldAndHolesBelowTheSizeAreZeros) {
  auto c = NewClient();
  const std::string head = Bytes(1 << 20, 8), far = Bytes(10, 9);
  const uint64_t at = 12 * kPart + 7, size = 12 * kPart + 100;
  S3Upload up(c.get(), kBucket, "window/far");
  ASSERT_TRUE(up.WriteAt(at, far.data(), far.size()).ok());
  ASSERT_TRUE(up.WriteAt(0, head.data(), head.size()).ok());
  EXPECT_EQ(up.spilled_bytes(), far.size());
  up.ExtendTo(size);
  ASSERT_TRUE(up.Finish().ok());
  EXPECT_EQ(up.parts(), 13);
  Result<S3ObjectInfo> info = c->HeadObject(kBucket, "window/far");
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->size, size);
  std::string got(head.size() + 4096, '\1'), tail(size - (at - 50), '\1');
  ASSERT_TRUE(c->GetRange(kBucket, "window/far", 0, got.size(), got.data()).ok());
  ASSERT_TRUE(c->GetRange(kBucket, "window/far", at - 50, tail.size(), tail.data()).ok());
  EXPECT_TRUE(got == head + std::string(4096, '\0'));
  EXPECT_TRUE(tail == std::string(50, '\0') + far + std::string(size - at - far.size(), '\0'));
}

TEST_F(S3UploadCheck, BadWritesAreTypedErrorsNamingTheBytes) {
  auto c = NewClient();
  const std::string data = Bytes(kPart + 1, 3);
  {
    S3Upload up(c.get(), kBucket, "window/overlap");
    ASSERT_TRUE(up.WriteAt(0, data.data(), 100).ok());
    Status s = up.WriteAt(50, data.data(), 10);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
    EXPECT_NE(s.message().find("s3://upload-check/window/overlap at bytes [50, 60): overlaps"),
              std::string::npos)
        << s.ToString();
  }
  {
    S3Upload up(c.get(), kBucket, "window/sent");
    ASSERT_TRUE(up.WriteAt(0, data.data(), data.size()).ok());  // part 1 full and sent
    Status s = up.WriteAt(10, data.data(), 10);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
    EXPECT_NE(s.message().find("at bytes [10, 20): part 1 was already sent"), std::string::npos)
        << s.ToString();
  }
  {
    S3Upload up(c.get(), kBucket, "window/hole");
    ASSERT_TRUE(up.WriteAt(0, data.data(), 10).ok());
    ASSERT_TRUE(up.WriteAt(100, data.data(), 10).ok());
    Status s = up.Finish();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
    EXPECT_NE(s.message().find("bytes from 10 to 100 were never written"), std::string::npos)
        << s.ToString();
  }
  for (const char* key : {"window/overlap", "window/sent", "window/hole"}) {
    EXPECT_EQ(c->HeadObject(kBucket, key).status().code(), StatusCode::kNotFound) << key;
  }
}

// Two files through one storage: the second writes into the first's part
// buffers (no fresh allocation), and both read back bit for bit.
TEST_F(S3UploadCheck, StorageReusesPartBuffersAcrossFiles) {
  S3Storage storage(NewClient());
  const std::string data = Bytes(3 * kPart + 5, 4);
  int allocated = 0;
  for (int i = 0; i < 2; ++i) {
    const std::string path = std::string("s3://") + kBucket + "/window/file" + std::to_string(i);
    Result<std::unique_ptr<WritableFile>> f = storage.NewWritableFile(path, {});
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    for (size_t off = 0; off < data.size(); off += 1 << 20) {
      const size_t n = std::min<size_t>(data.size() - off, 1 << 20);
      ASSERT_TRUE((*f)->WriteAt(off, data.data() + off, n).ok());
    }
    ASSERT_TRUE((*f)->Sync().ok());
    ASSERT_TRUE((*f)->Close().ok());
    if (i == 0) allocated = storage.part_pool().allocated();
    EXPECT_TRUE(*storage.client()->GetObject(kBucket, "window/file" + std::to_string(i)) == data);
  }
  EXPECT_GT(allocated, 0);
  EXPECT_EQ(storage.part_pool().allocated(), allocated);
}

}  // namespace
}  // namespace shardpoint::internal_objstore
