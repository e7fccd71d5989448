// The CLI's commands on s3:// paths against a real Ceph radosgw (the ctest
// fixture s3_server): convert a PyTorch DCP directory to an s3:// checkpoint
// and back, export it to HF locally and on S3, diff across storages; the
// object-store flags (--endpoint-url, --region, --addressing-style,
// --profile; --part-size-mib, --max-connections) in place of the environment; what an object store
// refuses.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "src/objstore/s3_storage.h"
#include "tests/s3/s3_server.h"
#include "tests/testing/run_command.h"

namespace shardpoint {
namespace {

using testing::CommandResult;
using ::testing::HasSubstr;

constexpr char kBucket[] = "cli-check";

CommandResult Cli(const std::string& args, const std::string& env = "") {
  return testing::RunCommand(env + std::string(SP_CLI_PATH) + " " + args + " 2>&1");
}

class S3CliCheck : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    Result<internal_objstore::S3Options> o = internal_objstore::ResolveS3Options({});
    ASSERT_TRUE(o.ok()) << o.status().ToString();
    Result<std::unique_ptr<internal_objstore::S3Client>> c = internal_objstore::S3Client::Make(*o);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    ASSERT_TRUE((*c)->CreateBucket(kBucket).ok());
  }
  void SetUp() override {
    const std::string n =
        std::to_string(std::chrono::steady_clock::now().time_since_epoch().count());
    s3_ = std::string("s3://") + kBucket + "/" + n;
    local_ = ::testing::TempDir() + "sp_s3_cli_" + n;
    std::filesystem::create_directories(local_);
  }
  void TearDown() override { std::filesystem::remove_all(local_); }
  std::string s3_, local_;
};

// DCP -> s3:// -> DCP and HF (local and on S3): each step bit for bit (diff
// compares every tensor bitwise).
TEST_F(S3CliCheck, ConvertExportAndDiffAcrossStorages) {
  const std::string dcp = SP_DCP_FIXTURE, ck = s3_ + "/ck";
  CommandResult r = Cli("convert " + dcp + " " + ck);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  r = Cli("verify " + ck);
  EXPECT_EQ(r.exit_code, 0) << r.out;
  r = Cli("diff " + dcp + " " + ck);
  EXPECT_EQ(r.exit_code, 0) << r.out;

  r = Cli("convert --to dcp " + ck + " " + local_ + "/dcp");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  r = Cli("diff " + local_ + "/dcp " + dcp);
  EXPECT_EQ(r.exit_code, 0) << r.out;
  r = Cli("convert --to dcp " + ck + " " + s3_ + "/dcp");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  r = Cli("diff " + s3_ + "/dcp " + dcp);
  EXPECT_EQ(r.exit_code, 0) << r.out;

  r = Cli("export-hf " + ck + " " + local_ + "/hf");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  r = Cli("diff " + local_ + "/hf " + ck);
  EXPECT_EQ(r.exit_code, 0) << r.out;
  r = Cli("export-hf " + ck + " " + s3_ + "/hf");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  r = Cli("diff " + s3_ + "/hf " + local_ + "/hf");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  // an HF model on S3 converts back to a checkpoint on S3
  r = Cli("convert " + s3_ + "/hf " + s3_ + "/ck2");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  r = Cli("diff " + s3_ + "/ck2 " + dcp);
  EXPECT_EQ(r.exit_code, 0) << r.out;

  // Into a prefix that holds something: refused, and with --overwrite too
  // (no rename to replace it atomically); the checkpoint stays as it was.
  r = Cli("convert " + dcp + " " + ck);
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_THAT(r.out, HasSubstr("not empty"));
  r = Cli("export-hf --overwrite " + ck + " " + s3_ + "/hf");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_THAT(r.out, HasSubstr("no rename"));
  r = Cli("verify " + ck);
  EXPECT_EQ(r.exit_code, 0) << r.out;
}

// A convert killed while uploading leaves its multipart upload open (parts
// kept and billed, invisible to listings); the next convert into the same
// prefix aborts it after its commit, and leaves another prefix's alone.
TEST_F(S3CliCheck, AConvertAbortsTheUploadACrashedOneLeftOpen) {
  Result<internal_objstore::S3Options> o = internal_objstore::ResolveS3Options({});
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  Result<std::unique_ptr<internal_objstore::S3Client>> c = internal_objstore::S3Client::Make(*o);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const std::string prefix = s3_.substr(std::string("s3://").size() + sizeof(kBucket));
  const std::string key = prefix + "/ck/data/0.safetensors", other = prefix + "/ck-other/x";
  Result<std::string> stale = (*c)->CreateMultipartUpload(kBucket, key);
  ASSERT_TRUE(stale.ok()) << stale.status().ToString();
  ASSERT_TRUE((*c)->UploadPart(kBucket, key, *stale, 1, std::string(4096, 'x')).ok());
  Result<std::string> kept = (*c)->CreateMultipartUpload(kBucket, other);
  ASSERT_TRUE(kept.ok()) << kept.status().ToString();
  CommandResult r = Cli("convert " + std::string(SP_DCP_FIXTURE) + " " + s3_ + "/ck");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  r = Cli("diff " + std::string(SP_DCP_FIXTURE) + " " + s3_ + "/ck");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  Result<std::vector<internal_objstore::S3OpenUpload>> open =
      (*c)->ListMultipartUploads(kBucket, prefix + "/ck/");
  ASSERT_TRUE(open.ok()) << open.status().ToString();
  EXPECT_TRUE(open->empty()) << (*open)[0].key;
  Result<std::vector<internal_objstore::S3OpenUpload>> left =
      (*c)->ListMultipartUploads(kBucket, prefix + "/ck-other/");
  ASSERT_TRUE(left.ok()) << left.status().ToString();
  ASSERT_EQ(left->size(), 1u);
  EXPECT_EQ((*left)[0].upload_id, *kept);
  EXPECT_TRUE((*c)->AbortMultipartUpload(kBucket, other, *kept).ok());
}

// The flags, with no AWS variable in the environment: credentials from a
// named profile of a credentials file, endpoint and addressing from flags.
TEST_F(S3CliCheck, FlagsReplaceTheEnvironment) {
  const std::string ck = s3_ + "/flags";
  CommandResult r = Cli("convert " + std::string(SP_DCP_FIXTURE) + " " + ck);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const std::string creds = local_ + "/credentials";
  std::ofstream(creds) << "[ci]\naws_access_key_id = " << std::getenv("AWS_ACCESS_KEY_ID")
                       << "\naws_secret_access_key = " << std::getenv("AWS_SECRET_ACCESS_KEY")
                       << "\n";
  const std::string bare =
      "env -u AWS_ENDPOINT_URL -u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY -u AWS_REGION "
      "-u AWS_PROFILE AWS_CONFIG_FILE=/nonexistent AWS_SHARED_CREDENTIALS_FILE=" +
      creds + " ";
  const std::string flags = " --endpoint-url " + std::string(std::getenv("AWS_ENDPOINT_URL")) +
                            " --region us-east-1 --addressing-style path --profile ci ";
  for (const char* cmd : {"inspect", "verify"}) {
    r = Cli(std::string(cmd) + flags + ck, bare);
    EXPECT_EQ(r.exit_code, 0) << cmd << ": " << r.out;
  }
  r = Cli("export-hf" + flags + ck + " " + local_ + "/hf", bare);
  EXPECT_EQ(r.exit_code, 0) << r.out;
  r = Cli("diff" + flags + ck + " " + local_ + "/hf", bare);
  EXPECT_EQ(r.exit_code, 0) << r.out;
  r = Cli("convert" + flags + local_ + "/hf " + s3_ + "/flags2", bare);
  EXPECT_EQ(r.exit_code, 0) << r.out;
  // Without the flags there are no credentials (the default profile is absent).
  r = Cli("inspect " + ck, bare);
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_THAT(r.out, HasSubstr("credentials"));
  // A profile that is not in the file: named in the error.
  r = Cli("inspect --profile nosuch --endpoint-url http://127.0.0.1:1 " + ck, bare);
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_THAT(r.out, HasSubstr("credentials"));
  r = Cli("inspect --addressing-style sideways " + ck, bare);
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_THAT(r.out, HasSubstr("--addressing-style"));
  // The throughput flags: taken, and checked.
  r = Cli("convert" + flags + "--part-size-mib 5 --max-connections 2 " + local_ + "/hf " + s3_ +
              "/flags3",
          bare);
  EXPECT_EQ(r.exit_code, 0) << r.out;
  r = Cli("convert" + flags + "--part-size-mib 4 " + local_ + "/hf " + s3_ + "/flags4", bare);
  EXPECT_NE(r.exit_code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("--part-size-mib"));
}

// --ca-bundle: the https port's certificate is signed by the fixture's
// throwaway CA; with the flag the CLI trusts it, without it (and no
// AWS_CA_BUNDLE) the certificate is refused as untrusted.
TEST_F(S3CliCheck, CaBundleFlagTrustsThePrivateCa) {
  const char* https = std::getenv("SHARDPOINT_S3_HTTPS_ENDPOINT");
  const char* ca = std::getenv("SHARDPOINT_S3_CA_BUNDLE");
  if (https == nullptr || ca == nullptr) GTEST_SKIP() << "no https port";
  const std::string ck = s3_ + "/https";
  const std::string env = "env -u AWS_CA_BUNDLE ";
  const std::string flags = " --endpoint-url " + std::string(https) + " --ca-bundle " + ca + " ";
  CommandResult r = Cli("convert" + flags + std::string(SP_DCP_FIXTURE) + " " + ck, env);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  r = Cli("verify" + flags + ck, env);
  EXPECT_EQ(r.exit_code, 0) << r.out;
  r = Cli("inspect --endpoint-url " + std::string(https) + " " + ck, env);
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_THAT(r.out, HasSubstr("not trusted"));
  r = Cli("inspect --endpoint-url " + std::string(https) + " --ca-bundle /nonexistent.pem " + ck,
          env);
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_THAT(r.out, HasSubstr("/nonexistent.pem"));
}

}  // namespace
}  // namespace shardpoint

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (argc < 2 || !shardpoint::testing::LoadS3ServerEnv(argv[1])) return 77;
  return RUN_ALL_TESTS();
}
