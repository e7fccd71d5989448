#include "src/io/file_map.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "shardpoint/storage.h"

namespace shardpoint::internal_io {
namespace {

class FileMapTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("sp_file_map_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
            "_" + std::to_string(reinterpret_cast<uintptr_t>(this)));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Write(const std::string& name, const std::string& bytes) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }
  std::filesystem::path dir_;
};

// The default storage maps a POSIX file: its bytes, in place, as sized
// when mapped; an empty file maps to no bytes.
TEST_F(FileMapTest, TheDefaultStorageMapsAFilesBytes) {
  std::mt19937 rng(3);
  std::string bytes(3 * 4096 + 17, '\0');
  for (char& c : bytes) c = static_cast<char>(rng());
  const std::string path = Write("a.bin", bytes);
  auto* mapper = dynamic_cast<FileMapper*>(DefaultStorage());
  ASSERT_NE(mapper, nullptr);
  Result<std::unique_ptr<MappedFile>> m = mapper->MapFile(path);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ((*m)->size(), bytes.size());
  EXPECT_EQ((*m)->bytes(), bytes);
  EXPECT_EQ((*m)->path(), path);
  Result<std::unique_ptr<MappedFile>> empty = mapper->MapFile(Write("empty", ""));
  ASSERT_TRUE(empty.ok()) << empty.status().ToString();
  EXPECT_EQ((*empty)->size(), 0u);
}

// A missing file is NotFound naming it; a directory and an s3:// path are
// refused, never mapped.
TEST_F(FileMapTest, AMissingFileADirectoryAndAnObjectAreRefused) {
  auto* mapper = dynamic_cast<FileMapper*>(DefaultStorage());
  ASSERT_NE(mapper, nullptr);
  const std::string missing = (dir_ / "missing").string();
  Result<std::unique_ptr<MappedFile>> m = mapper->MapFile(missing);
  EXPECT_EQ(m.status().code(), StatusCode::kNotFound) << m.status().ToString();
  EXPECT_NE(m.status().message().find(missing), std::string::npos) << m.status().ToString();
  EXPECT_FALSE(mapper->MapFile(dir_.string()).ok());
  m = mapper->MapFile("s3://bucket/key");
  EXPECT_EQ(m.status().code(), StatusCode::kFailedPrecondition) << m.status().ToString();
}

}  // namespace
}  // namespace shardpoint::internal_io
