// ResolveS3Options: explicit options, then the environment, then the
// profile in ~/.aws/credentials and ~/.aws/config.
#include "src/objstore/s3_options.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "shardpoint/object_store.h"

namespace shardpoint::internal_objstore {
namespace {

constexpr const char* kVars[] = {"AWS_ACCESS_KEY_ID",
                                 "AWS_SECRET_ACCESS_KEY",
                                 "AWS_SESSION_TOKEN",
                                 "AWS_REGION",
                                 "AWS_DEFAULT_REGION",
                                 "AWS_ENDPOINT_URL",
                                 "AWS_ENDPOINT_URL_S3",
                                 "AWS_PROFILE",
                                 "AWS_CONFIG_FILE",
                                 "AWS_SHARED_CREDENTIALS_FILE",
                                 "SHARDPOINT_S3_READ_BYTES",
                                 "SHARDPOINT_S3_LEASE_SECONDS",
                                 "HOME"};

// Clears the AWS variables and points HOME at a fresh directory; restores
// everything after.
class S3OptionsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* v : kVars) {
      const char* old = std::getenv(v);
      saved_.emplace_back(v, old == nullptr ? std::optional<std::string>() : std::string(old));
      ::unsetenv(v);
    }
    home_ =
        std::filesystem::temp_directory_path() / ("sp_s3_options_" + std::to_string(::getpid()));
    std::filesystem::create_directories(home_ / ".aws");
    ::setenv("HOME", home_.c_str(), 1);
  }
  void TearDown() override {
    for (const auto& [v, old] : saved_) {
      if (old)
        ::setenv(v, old->c_str(), 1);
      else
        ::unsetenv(v);
    }
    std::filesystem::remove_all(home_);
  }
  void Write(const std::string& name, const std::string& text) {
    std::ofstream(home_ / ".aws" / name) << text;
  }
  std::filesystem::path home_;
  std::vector<std::pair<const char*, std::optional<std::string>>> saved_;
};

TEST_F(S3OptionsTest, EnvironmentVariables) {
  ::setenv("AWS_ACCESS_KEY_ID", "AK", 1);
  ::setenv("AWS_SECRET_ACCESS_KEY", "SK", 1);
  ::setenv("AWS_SESSION_TOKEN", "TOK", 1);
  ::setenv("AWS_DEFAULT_REGION", "eu-west-1", 1);
  ::setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9000/", 1);
  ::setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:9001", 1);  // S3-specific wins
  Result<S3Options> o = ResolveS3Options({});
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->access_key_id, "AK");
  EXPECT_EQ(o->secret_access_key, "SK");
  EXPECT_EQ(o->session_token, "TOK");
  EXPECT_EQ(o->region, "eu-west-1");
  EXPECT_EQ(o->endpoint, "http://127.0.0.1:9001");
  ::setenv("AWS_REGION", "ap-south-1", 1);  // AWS_REGION before AWS_DEFAULT_REGION
  EXPECT_EQ(ResolveS3Options({})->region, "ap-south-1");
}

TEST_F(S3OptionsTest, ProfilesFromTheAwsFiles) {
  Write("credentials",
        "[default]\naws_access_key_id = DEF\naws_secret_access_key = DEFSECRET\n"
        "[work]\naws_access_key_id=WORK\naws_secret_access_key=WORKSECRET\n");
  Write("config",
        "[default]\nregion = us-west-2\n[profile work]\nregion = eu-central-1\n"
        "endpoint_url = https://s3.work.example\ns3 =\n  addressing_style = path\n");
  Result<S3Options> def = ResolveS3Options({});
  ASSERT_TRUE(def.ok()) << def.status().ToString();
  EXPECT_EQ(def->access_key_id, "DEF");
  EXPECT_EQ(def->region, "us-west-2");
  EXPECT_EQ(def->endpoint, "");
  ::setenv("AWS_PROFILE", "work", 1);
  Result<S3Options> work = ResolveS3Options({});
  ASSERT_TRUE(work.ok()) << work.status().ToString();
  EXPECT_EQ(work->access_key_id, "WORK");
  EXPECT_EQ(work->secret_access_key, "WORKSECRET");
  EXPECT_EQ(work->region, "eu-central-1");
  EXPECT_EQ(work->endpoint, "https://s3.work.example");
  // Explicit options win over everything.
  S3Options explicit_options;
  explicit_options.access_key_id = "X";
  explicit_options.secret_access_key = "Y";
  explicit_options.region = "r";
  Result<S3Options> x = ResolveS3Options(explicit_options);
  EXPECT_EQ(x->access_key_id, "X");
  EXPECT_EQ(x->region, "r");
}

TEST_F(S3OptionsTest, ErrorsNameTheProblemNotTheSecret) {
  Result<S3Options> none = ResolveS3Options({});
  EXPECT_EQ(none.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(none.status().message().find("no S3 credentials"), std::string::npos);
  Write("credentials", "[default]\naws_access_key_id = A\nthis line is wrong\n");
  Result<S3Options> bad = ResolveS3Options({});
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("credentials:3:"), std::string::npos)
      << bad.status().ToString();
  ::setenv("AWS_ACCESS_KEY_ID", "AK", 1);
  ::setenv("AWS_SECRET_ACCESS_KEY", "TOPSECRET", 1);
  ::setenv("AWS_ENDPOINT_URL", "ftp://x", 1);
  std::filesystem::remove(home_ / ".aws" / "credentials");
  Result<S3Options> scheme = ResolveS3Options({});
  EXPECT_EQ(scheme.status().code(), StatusCode::kInvalidArgument);
  S3Options o;
  o.access_key_id = "AK";
  o.secret_access_key = "TOPSECRET";
  EXPECT_EQ(DescribeS3Options(o).find("TOPSECRET"), std::string::npos);
}

// shardpoint's own knobs: the read request size of loads and the lease.
TEST_F(S3OptionsTest, ReadBytesAndLeaseFromTheEnvironment) {
  ::setenv("AWS_ACCESS_KEY_ID", "AK", 1);
  ::setenv("AWS_SECRET_ACCESS_KEY", "SK", 1);
  Result<S3Options> d = ResolveS3Options({});
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->read_request_bytes, uint64_t{16} << 20);
  EXPECT_EQ(d->lease_ms, 60000);
  ::setenv("SHARDPOINT_S3_READ_BYTES", "1048576", 1);
  ::setenv("SHARDPOINT_S3_LEASE_SECONDS", "3", 1);
  Result<S3Options> o = ResolveS3Options({});
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->read_request_bytes, uint64_t{1} << 20);
  EXPECT_EQ(o->lease_ms, 3000);
  for (const char* bad : {"0", "-5", "12k", "x"}) {
    ::setenv("SHARDPOINT_S3_LEASE_SECONDS", bad, 1);
    Result<S3Options> r = ResolveS3Options({});
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(r.status().message().find("SHARDPOINT_S3_LEASE_SECONDS"), std::string::npos)
        << r.status().ToString();
  }
  // Values set explicitly win over the variables.
  S3Options set;
  set.read_request_bytes = uint64_t{4} << 20;
  set.lease_ms = 7000;
  Result<S3Options> kept = ResolveS3Options(set);
  ASSERT_TRUE(kept.ok()) << kept.status().ToString();
  EXPECT_EQ(kept->read_request_bytes, uint64_t{4} << 20);
  EXPECT_EQ(kept->lease_ms, 7000);
  ::setenv("SHARDPOINT_S3_LEASE_SECONDS", "86401", 1);
  EXPECT_EQ(ResolveS3Options({}).status().code(), StatusCode::kInvalidArgument);
  ::unsetenv("SHARDPOINT_S3_LEASE_SECONDS");
  ::setenv("SHARDPOINT_S3_READ_BYTES", "1.5", 1);
  Result<S3Options> r = ResolveS3Options({});
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("SHARDPOINT_S3_READ_BYTES='1.5'"), std::string::npos)
      << r.status().ToString();
}

// The public throughput options: taken where set, the defaults where 0, and
// out-of-range values refused naming what is wrong.
TEST_F(S3OptionsTest, PublicPartSizeAndConnectionsAreChecked) {
  ObjectStoreOptions o;
  o.access_key_id = "AK";
  o.secret_access_key = "SK";
  o.endpoint = "http://127.0.0.1:1";
  o.part_size = uint64_t{5} << 20;
  o.parts_in_flight = 2;
  o.max_connections = 3;
  EXPECT_TRUE(MakeObjectStoreStorage(o).ok());
  o.part_size = uint64_t{1} << 20;
  Result<std::unique_ptr<Storage>> small = MakeObjectStoreStorage(o);
  EXPECT_EQ(small.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(small.status().message().find("part size 1048576 bytes is outside [5 MiB, 5 GiB]"),
            std::string::npos)
      << small.status().ToString();
  o.part_size = 0;
  o.parts_in_flight = -1;
  Result<std::unique_ptr<Storage>> negative = MakeObjectStoreStorage(o);
  EXPECT_EQ(negative.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(negative.status().message().find("parts_in_flight -1"), std::string::npos)
      << negative.status().ToString();
}

}  // namespace
}  // namespace shardpoint::internal_objstore
