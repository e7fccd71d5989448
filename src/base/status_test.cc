#include "shardpoint/status.h"

#include <gtest/gtest.h>

#include <string>

namespace shardpoint {
namespace {

Result<std::string> Found() { return std::string("value"); }
Result<std::string> Missing() { return NotFoundError("key 'w' in /ckpt/step_3"); }

TEST(ResultTest, ValueAccessOnSuccess) {
  Result<std::string> r = Found();
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value(), "value");
  EXPECT_EQ(*r, "value");
  EXPECT_EQ(r->size(), 5u);
  const Result<std::string>& c = r;
  EXPECT_EQ(c.value(), "value");
  EXPECT_EQ(*c, "value");
  EXPECT_EQ(c->size(), 5u);
  EXPECT_EQ(std::move(r).value(), "value");
}

TEST(ResultTest, OkStatusBecomesInternalError) {
  Result<int> r{OkStatus()};
  EXPECT_EQ(r.status().code(), StatusCode::kInternal);
}

// Reading the value of an error aborts with the status text (every accessor).
TEST(ResultDeathTest, ValueOfAnErrorAbortsWithTheStatus) {
  const std::string want =
      "shardpoint: Result accessed without a value: NotFound: key 'w' in /ckpt/step_3";
  EXPECT_DEATH(Missing().value(), want);
  EXPECT_DEATH(*Missing(), want);
  EXPECT_DEATH((void)Missing()->size(), want);
  EXPECT_DEATH(
      {
        const Result<std::string> c = Missing();
        (void)c.value();
      },
      want);
  EXPECT_DEATH(
      {
        Result<std::string> m = Missing();
        std::string s = std::move(m).value();
        (void)s;
      },
      want);
}

}  // namespace
}  // namespace shardpoint
