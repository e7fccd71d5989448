// The stored-zip directory reader on archives built here byte by byte (the
// layout torch.save writes: stored entries, zip64 end records), and one test
// per malformed or refused archive.
#include "src/dcp/zip.h"

#include <gtest/gtest.h>

#include <cstring>

namespace shardpoint::internal_dcp {
namespace {

struct Ent {
  std::string name;
  std::string data;
  uint16_t method = 0;
  uint16_t flags = 0;
};

struct Image {
  std::string bytes;
  std::vector<size_t> local, central;
  size_t dir = 0, eocd = 0;
};

void Put(std::string* s, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) s->push_back(static_cast<char>(v >> (8 * i)));
}
void Set(std::string* s, size_t at, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) (*s)[at + i] = static_cast<char>(v >> (8 * i));
}

Image MakeZip(const std::vector<Ent>& ents, bool zip64 = true) {
  Image img;
  std::string& s = img.bytes;
  for (const Ent& e : ents) {
    img.local.push_back(s.size());
    Put(&s, 0x04034b50, 4);
    Put(&s, 20, 2);
    Put(&s, e.flags, 2);
    Put(&s, e.method, 2);
    Put(&s, 0, 4);
    Put(&s, Crc32(0, e.data.data(), e.data.size()), 4);
    Put(&s, e.data.size(), 4);
    Put(&s, e.data.size(), 4);
    Put(&s, e.name.size(), 2);
    Put(&s, 4, 2);
    s += e.name;
    s += std::string("FB\0\0", 4);  // an empty extra field, as torch pads with
    s += e.data;
  }
  img.dir = s.size();
  for (size_t i = 0; i < ents.size(); ++i) {
    const Ent& e = ents[i];
    img.central.push_back(s.size());
    Put(&s, 0x02014b50, 4);
    Put(&s, 20, 2);
    Put(&s, 20, 2);
    Put(&s, e.flags, 2);
    Put(&s, e.method, 2);
    Put(&s, 0, 4);
    Put(&s, Crc32(0, e.data.data(), e.data.size()), 4);
    Put(&s, e.data.size(), 4);
    Put(&s, e.data.size(), 4);
    Put(&s, e.name.size(), 2);
    Put(&s, 0, 2);
    Put(&s, 0, 2);
    Put(&s, 0, 2);
    Put(&s, 0, 2);
    Put(&s, 0, 4);
    Put(&s, img.local[i], 4);
    s += e.name;
  }
  const size_t dir_size = s.size() - img.dir;
  if (zip64) {
    const size_t rec = s.size();
    Put(&s, 0x06064b50, 4);
    Put(&s, 44, 8);
    Put(&s, 45, 2);
    Put(&s, 45, 2);
    Put(&s, 0, 4);
    Put(&s, 0, 4);
    Put(&s, ents.size(), 8);
    Put(&s, ents.size(), 8);
    Put(&s, dir_size, 8);
    Put(&s, img.dir, 8);
    Put(&s, 0x07064b50, 4);
    Put(&s, 0, 4);
    Put(&s, rec, 8);
    Put(&s, 1, 4);
  }
  img.eocd = s.size();
  Put(&s, 0x06054b50, 4);
  Put(&s, 0, 2);
  Put(&s, 0, 2);
  Put(&s, ents.size(), 2);
  Put(&s, ents.size(), 2);
  Put(&s, dir_size, 4);
  Put(&s, img.dir, 4);
  Put(&s, 0, 2);
  return img;
}

Result<std::vector<ZipEntry>> Read(const std::string& bytes) {
  return ReadZipDirectory(
      bytes.size(),
      [&](uint64_t off, size_t n, char* dst) -> Status {
        if (off > bytes.size() || n > bytes.size() - off) return InternalError("read past the end");
        std::memcpy(dst, bytes.data() + off, n);
        return OkStatus();
      },
      "item.zip");
}

void ExpectError(const std::string& bytes, StatusCode code, const std::string& text) {
  Result<std::vector<ZipEntry>> r = Read(bytes);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), code) << r.status().ToString();
  EXPECT_NE(r.status().ToString().find(text), std::string::npos) << r.status().ToString();
  EXPECT_NE(r.status().ToString().find("item.zip"), std::string::npos);
}

const std::vector<Ent> kEnts = {{"archive/data.pkl", "pickle"}, {"archive/data/0", "0123456789"}};

TEST(DcpZipTest, ListsStoredEntriesWithZip64EndRecords) {
  for (bool zip64 : {true, false}) {
    Image img = MakeZip(kEnts, zip64);
    Result<std::vector<ZipEntry>> r = Read(img.bytes);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_EQ(r->size(), 2u);
    EXPECT_EQ((*r)[1].name, "archive/data/0");
    EXPECT_EQ(img.bytes.substr((*r)[1].data_offset, (*r)[1].size), "0123456789");
    EXPECT_EQ((*r)[1].crc32, Crc32(0, "0123456789", 10));
  }
}

TEST(DcpZipTest, Crc32OfTheCheckValue) { EXPECT_EQ(Crc32(0, "123456789", 9), 0xCBF43926u); }

TEST(DcpZipTest, NotAZip) {
  ExpectError(std::string(100, 'x'), StatusCode::kDataLoss, "end of central");
}

TEST(DcpZipTest, ShorterThanAnEndRecord) { ExpectError("PK", StatusCode::kDataLoss, "shorter"); }

TEST(DcpZipTest, ArchiveWithACommentIsNotRead) {
  Image img = MakeZip(kEnts);
  Set(&img.bytes, img.eocd + 20, 3, 2);
  img.bytes += "abc";
  ExpectError(img.bytes, StatusCode::kDataLoss, "comment");
}

TEST(DcpZipTest, TruncatedArchive) {
  Image img = MakeZip(kEnts);
  ExpectError(img.bytes.substr(0, img.bytes.size() - 5), StatusCode::kDataLoss, "end of central");
}

TEST(DcpZipTest, CompressedEntryIsRefusedByName) {
  std::vector<Ent> ents = kEnts;
  ents[1].method = 8;
  ExpectError(MakeZip(ents).bytes, StatusCode::kFailedPrecondition,
              "'archive/data/0' is compressed");
}

TEST(DcpZipTest, EncryptedEntryIsRefused) {
  std::vector<Ent> ents = kEnts;
  ents[0].flags = 1;
  ExpectError(MakeZip(ents).bytes, StatusCode::kFailedPrecondition, "encrypted");
}

TEST(DcpZipTest, EntryRunningIntoTheDirectory) {
  Image img = MakeZip(kEnts);
  Set(&img.bytes, img.central[1] + 20, 1000, 4);
  Set(&img.bytes, img.central[1] + 24, 1000, 4);
  ExpectError(img.bytes, StatusCode::kDataLoss, "runs past the entries");
}

TEST(DcpZipTest, DirectoryOutsideTheArchive) {
  Image img = MakeZip(kEnts, false);
  Set(&img.bytes, img.eocd + 16, 0xFFFFFF00u, 4);
  ExpectError(img.bytes, StatusCode::kDataLoss, "outside the archive");
}

TEST(DcpZipTest, Zip64RecordOffsetOutsideTheArchive) {
  Image img = MakeZip(kEnts);
  Set(&img.bytes, img.eocd - 20 + 8, uint64_t{1} << 40, 8);
  ExpectError(img.bytes, StatusCode::kDataLoss, "zip64 end record offset");
}

TEST(DcpZipTest, Zip64DirectoryOffsetOutsideTheArchive) {
  Image img = MakeZip(kEnts);
  Set(&img.bytes, img.eocd - 20 - 56 + 48, uint64_t{1} << 62, 8);
  ExpectError(img.bytes, StatusCode::kDataLoss, "outside the archive");
}

TEST(DcpZipTest, LocalHeaderOutsideTheEntries) {
  Image img = MakeZip(kEnts);
  Set(&img.bytes, img.central[0] + 42, img.dir - 10, 4);
  ExpectError(img.bytes, StatusCode::kDataLoss, "local header is outside");
}

TEST(DcpZipTest, LocalHeaderNamesAnotherEntry) {
  Image img = MakeZip(kEnts);
  img.bytes[img.local[0] + 30] = 'X';
  ExpectError(img.bytes, StatusCode::kDataLoss, "names another entry");
}

TEST(DcpZipTest, NoLocalHeaderSignature) {
  Image img = MakeZip(kEnts);
  img.bytes[img.local[1]] = 'Q';
  ExpectError(img.bytes, StatusCode::kDataLoss, "no local header");
}

TEST(DcpZipTest, SameNameTwice) {
  ExpectError(MakeZip({{"a/x", "1"}, {"a/x", "2"}}).bytes, StatusCode::kDataLoss, "twice");
}

TEST(DcpZipTest, SaturatedSizesWithoutZip64Extra) {
  Image img = MakeZip(kEnts);
  Set(&img.bytes, img.central[0] + 20, 0xFFFFFFFFu, 4);
  Set(&img.bytes, img.central[0] + 24, 0xFFFFFFFFu, 4);
  ExpectError(img.bytes, StatusCode::kDataLoss, "zip64 extra");
}

TEST(DcpZipTest, MoreEntriesThanTheDirectoryHolds) {
  Image img = MakeZip(kEnts, false);
  Set(&img.bytes, img.eocd + 8, 900, 2);
  Set(&img.bytes, img.eocd + 10, 900, 2);
  ExpectError(img.bytes, StatusCode::kDataLoss, "cannot fit");
}

TEST(DcpZipTest, MultiDiskArchiveIsRefused) {
  Image img = MakeZip(kEnts, false);
  Set(&img.bytes, img.eocd + 4, 1, 2);
  ExpectError(img.bytes, StatusCode::kFailedPrecondition, "multi-disk");
}

TEST(DcpZipTest, BadCentralHeaderSignature) {
  Image img = MakeZip(kEnts);
  img.bytes[img.central[1]] = 'Q';
  ExpectError(img.bytes, StatusCode::kDataLoss, "no central directory header");
}

}  // namespace
}  // namespace shardpoint::internal_dcp
