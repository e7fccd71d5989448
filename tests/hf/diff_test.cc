// DiffCheckpoints and the diff CLI text: equal, different, missing, mismatched.
#include "tools/lib/diff.h"

#include <gtest/gtest.h>

#include "tests/hf/hf_model.h"
#include "tools/lib/hf_common.h"

namespace shardpoint {
namespace {

using namespace hftest;

TEST(HfDiff, FindsEveryKindOfDifference) {
  std::vector<HfTensor> a = {RandomTensor("same", {4, 4}), RandomTensor("changed", {1000}),
                             RandomTensor("only_a", {2}),  RandomTensor("reshaped", {2, 3}),
                             RandomTensor("scalar", {}),   RandomTensor("empty", {0, 3})};
  std::vector<HfTensor> b = a;
  float v;
  std::memcpy(&v, b[1].bytes.data() + 4 * 777, 4);
  v += 0.5f;
  std::memcpy(b[1].bytes.data() + 4 * 777, &v, 4);
  b[2] = RandomTensor("only_b", {2});
  b[3].shape = {3, 2};
  const std::string da = TempDir("diff_a"), db = TempDir("diff_b");
  ASSERT_TRUE(WriteHfModel(da, a).ok());
  ASSERT_TRUE(WriteHfModel(db, b).ok());
  DiffOptions o;
  o.block_bytes = 64;  // many blocks
  Result<DiffReport> r = DiffCheckpoints(da, db, IdentityHfMapping(), o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->equal());
  std::map<std::string, DiffEntry> by_key;
  for (const DiffEntry& e : r->entries) by_key[e.key] = e;
  EXPECT_EQ(by_key["same"].kind, DiffEntry::kEqual);
  EXPECT_EQ(by_key["scalar"].kind, DiffEntry::kEqual);
  EXPECT_EQ(by_key["empty"].kind, DiffEntry::kEqual);
  EXPECT_EQ(by_key["changed"].kind, DiffEntry::kDifferent);
  EXPECT_EQ(by_key["changed"].num_different, 1);
  EXPECT_NEAR(by_key["changed"].max_abs_diff, 0.5, 1e-6);
  EXPECT_EQ(by_key["only_a"].kind, DiffEntry::kOnlyA);
  EXPECT_EQ(by_key["only_b"].kind, DiffEntry::kOnlyB);
  EXPECT_EQ(by_key["reshaped"].kind, DiffEntry::kMismatch);
  const std::string text = tools::DiffText(*r, false);
  EXPECT_NE(text.find("DIFFERENT  changed"), std::string::npos) << text;
  EXPECT_NE(text.find("only in B  only_b"), std::string::npos) << text;
  // With a tolerance the change counts as equal.
  o.atol = 1;
  r = DiffCheckpoints(da, da, IdentityHfMapping(), o);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->equal());
  EXPECT_NE(tools::DiffText(*r, false).find("EQUAL: 6 tensors"), std::string::npos);
}

// A safetensors file whose header JSON is followed by CR, space, tab and LF
// (upstream safetensors reads it; files padded so exist) diffs equal to the
// same model padded with spaces.
TEST(HfDiff, HeaderPaddedWithJsonWhitespaceReads) {
  const std::vector<HfTensor> t = {RandomTensor("w", {4, 6}), RandomTensor("b", {5}, DType::kBF16)};
  const std::string da = TempDir("ws_a"), db = TempDir("ws_b");
  ASSERT_TRUE(WriteHfModel(da, t).ok());
  ASSERT_TRUE(WriteHfModel(db, t).ok());
  const std::string path = db + "/model.safetensors";
  Result<std::string> file = DefaultStorage()->ReadFileToString(path);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t{static_cast<uint8_t>((*file)[i])} << (8 * i);
  std::string header = file->substr(8, n);
  header.erase(header.find_last_not_of(' ') + 1);
  header += "\r \t\n";
  std::string padded(8, '\0');
  for (int i = 0; i < 8; ++i) padded[i] = static_cast<char>(header.size() >> (8 * i));
  padded += header + file->substr(8 + n);
  ASSERT_TRUE(DefaultStorage()->WriteStringToFile(path, padded).ok());
  Result<DiffReport> r = DiffCheckpoints(da, db, IdentityHfMapping(), DiffOptions{});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->equal());
  ASSERT_EQ(r->entries.size(), 2u);
  for (const DiffEntry& e : r->entries) EXPECT_EQ(e.kind, DiffEntry::kEqual) << e.key;
}

TEST(HfCli, ByteSizesAndVariables) {
  EXPECT_EQ(*tools::ParseByteSize("5GB"), 5'000'000'000u);
  EXPECT_EQ(*tools::ParseByteSize("2MiB"), 2u << 20);
  EXPECT_EQ(*tools::ParseByteSize("123"), 123u);
  EXPECT_FALSE(tools::ParseByteSize("5XB").ok());
  EXPECT_FALSE(tools::ParseByteSize("GB").ok());
  EXPECT_EQ(tools::ParseVariables({"a=3"})->at("a"), 3);
  EXPECT_FALSE(tools::ParseVariables({"a=x"}).ok());
  EXPECT_FALSE(tools::ParseVariables({"=3"}).ok());
  EXPECT_TRUE(tools::LoadMapping("llama").ok());
  EXPECT_FALSE(tools::LoadMapping("no_such_rules").ok());
}

}  // namespace
}  // namespace shardpoint
