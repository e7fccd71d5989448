// ErrnoStatus: the code and the text every OS failure reads with.
#include "src/io/errno_status.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace shardpoint::internal_io {
namespace {

TEST(ErrnoStatusTest, MissingFileIsNotFoundWithTheSystemsText) {
  const Status s = ErrnoStatus("open ckpt/manifest for reading", ENOENT);
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "open ckpt/manifest for reading: " + std::string(std::strerror(ENOENT)));
}

TEST(ErrnoStatusTest, EveryOtherNumberIsAnIOError) {
  for (int err : {EACCES, ENOSPC, EIO, EISDIR, ENOMEM, EXDEV}) {
    const Status s = ErrnoStatus("write f", err);
    EXPECT_EQ(s.code(), StatusCode::kIOError) << err;
    EXPECT_EQ(s.message(), "write f: " + std::string(std::strerror(err)));
  }
}

}  // namespace
}  // namespace shardpoint::internal_io
