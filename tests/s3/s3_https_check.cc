// HTTPS against the real radosgw: the same gateway's TLS port
// (SHARDPOINT_S3_HTTPS_ENDPOINT), its certificate signed by a throwaway CA
// the fixture made (SHARDPOINT_S3_CA_BUNDLE; tests/s3/radosgw.sh). With the
// CA given (ObjectStoreOptions::ca_bundle or AWS_CA_BUNDLE) a save and a load
// go over https bit for bit; without it the certificate is not trusted: a
// FailedPrecondition naming the endpoint, at once (not retried, no hang),
// and nothing is written (no fallback to http).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <random>

#include "shardpoint/checkpoint.h"
#include "shardpoint/object_store.h"
#include "tests/testing/ranks.h"

namespace shardpoint {
namespace {

constexpr char kBucket[] = "shardpoint";

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? "" : v;
}

std::string UniqueDir(const std::string& name) {
  return "s3://" + std::string(kBucket) + "/" + name + "-" +
         std::to_string(std::chrono::steady_clock::now().time_since_epoch().count());
}

std::unique_ptr<Storage> HttpsStorage(const std::string& ca_bundle) {
  ObjectStoreOptions o;
  o.endpoint = Env("SHARDPOINT_S3_HTTPS_ENDPOINT");
  o.ca_bundle = ca_bundle;
  Result<std::unique_ptr<Storage>> s = MakeObjectStoreStorage(o);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? std::move(*s) : nullptr;
}

// Rank `rank`'s row of a [ranks, n] tensor.
State Row(std::vector<float>* data, int rank, int64_t n, int ranks = 2) {
  State s;
  LocalTensor t;
  t.dtype = DType::kF32;
  t.shape = {1, n};
  t.data = data->data();
  t.segments = {Segment{"w", {ranks, n}, Box{{rank, 0}, {1, n}}, {0, 0}}};
  s.tensors.push_back(t);
  return s;
}

class S3HttpsCheck : public ::testing::Test {
 protected:
  void SetUp() override {
    if (Env("SHARDPOINT_S3_HTTPS_ENDPOINT").empty()) GTEST_SKIP() << "no https port";
    ::unsetenv("AWS_CA_BUNDLE");
  }
  void TearDown() override { ::unsetenv("AWS_CA_BUNDLE"); }
};

// 2 ranks save 6 MiB each over https with the CA as
// an option; loaded back bit for bit through a storage given the CA by
// AWS_CA_BUNDLE alone.
TEST_F(S3HttpsCheck, SaveAndLoadBitForBitWithTheCaGiven) {
  const int64_t n = int64_t{6} << 18;  // 6 MiB of f32 per rank
  std::mt19937 rng(39);
  std::uniform_real_distribution<float> dist(-1, 1);
  std::vector<std::vector<float>> data(2, std::vector<float>(n));
  for (auto& d : data)
    for (float& x : d) x = dist(rng);
  const std::string dir = UniqueDir("https");
  auto by_option = HttpsStorage(Env("SHARDPOINT_S3_CA_BUNDLE"));
  ASSERT_NE(by_option, nullptr);
  SaveOptions so;
  so.storage = by_option.get();
  Status saved = testing::FirstError(RunThreadRanks(2, [&](Comm& comm) {
    return Save(Row(&data[comm.rank()], comm.rank(), n), dir, comm, so).status();
  }));
  ASSERT_TRUE(saved.ok()) << saved.ToString();

  ::setenv("AWS_CA_BUNDLE", Env("SHARDPOINT_S3_CA_BUNDLE").c_str(), 1);
  auto by_env = HttpsStorage("");
  ASSERT_NE(by_env, nullptr);
  LoadOptions lo;
  lo.storage = by_env.get();
  std::vector<std::vector<float>> back(2, std::vector<float>(n, 0.f));
  Status loaded = testing::FirstError(RunThreadRanks(2, [&](Comm& comm) {
    State into = Row(&back[comm.rank()], comm.rank(), n);
    return Load(into, dir, comm, lo).status();
  }));
  ASSERT_TRUE(loaded.ok()) << loaded.ToString();
  EXPECT_TRUE(back == data);
}

// Without the CA: the certificate is not trusted. FailedPrecondition naming
// the https endpoint, in one attempt (bounded time), and nothing written.
TEST_F(S3HttpsCheck, WithoutTheCaTheCertificateIsNotTrusted) {
  const std::string endpoint = Env("SHARDPOINT_S3_HTTPS_ENDPOINT");
  const std::string dir = UniqueDir("https-untrusted");
  std::vector<float> a(1000, 2.5f);
  auto untrusted = HttpsStorage("");
  ASSERT_NE(untrusted, nullptr);
  SaveOptions so;
  so.storage = untrusted.get();
  auto comm = MakeSingleComm();
  const auto start = std::chrono::steady_clock::now();
  Result<SaveStats> saved = Save(Row(&a, 0, 1000, 1), dir, *comm, so);
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_EQ(saved.status().code(), StatusCode::kFailedPrecondition) << saved.status().ToString();
  const std::string& m = saved.status().message();
  EXPECT_NE(m.find("TLS certificate of " + endpoint + " is not trusted"), std::string::npos) << m;
  EXPECT_NE(m.find("AWS_CA_BUNDLE"), std::string::npos) << m;
  EXPECT_LT(secs, 10.0) << "retried or hung: " << m;
  LoadOptions lo;
  lo.storage = untrusted.get();
  State into = Row(&a, 0, 1000, 1);
  Result<LoadResult> load = Load(into, dir, *comm, lo);
  EXPECT_EQ(load.status().code(), StatusCode::kFailedPrecondition) << load.status().ToString();

  // Nothing reached the gateway by another way (no fallback to http).
  auto trusted = HttpsStorage(Env("SHARDPOINT_S3_CA_BUNDLE"));
  ASSERT_NE(trusted, nullptr);
  Result<std::vector<std::string>> left = trusted->ListDir(dir);
  ASSERT_TRUE(left.ok()) << left.status().ToString();
  EXPECT_TRUE(left->empty());

  // A CA file that cannot be read: InvalidArgument naming it, before any request.
  ObjectStoreOptions bad;
  bad.endpoint = endpoint;
  bad.ca_bundle = "/nonexistent/ca.pem";
  Result<std::unique_ptr<Storage>> made = MakeObjectStoreStorage(bad);
  EXPECT_EQ(made.status().code(), StatusCode::kInvalidArgument) << made.status().ToString();
  EXPECT_NE(made.status().message().find("/nonexistent/ca.pem"), std::string::npos);
}

}  // namespace
}  // namespace shardpoint
