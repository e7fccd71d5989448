#include "src/checkpoint/piece_message.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "src/checkpoint/checksum_message.h"

namespace shardpoint::internal_checkpoint {
namespace {

using ::testing::HasSubstr;

PieceMessage TwoPieces() {
  PieceMessage m;
  m.private_bytes = 4096;
  m.pieces.push_back(SharedPiece{0, 1, 0, Box{{0, 8}, {4, 8}}, 2, 64});
  m.pieces.push_back(SharedPiece{3, 2, 5, Box{{2}, {6}}, 7, 24});
  return m;
}

TEST(PieceMessage, RoundTrips) {
  const std::string bytes = EncodePieceMessage(TwoPieces());
  Result<PieceMessage> m = DecodePieceMessage(bytes, 1);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(EncodePieceMessage(*m), bytes);
  ASSERT_EQ(m->pieces.size(), 2u);
  EXPECT_EQ(m->private_bytes, 4096u);
  EXPECT_EQ(m->pieces[1].in_chunk.shape, (Shape{6}));
}

TEST(PieceMessage, TruncatedNamesTheRank) {
  const std::string bytes = EncodePieceMessage(TwoPieces());
  Result<PieceMessage> m =
      DecodePieceMessage(std::string_view(bytes).substr(0, bytes.size() - 3), 5);
  ASSERT_EQ(m.status().code(), StatusCode::kDataLoss);
  EXPECT_THAT(m.status().message(), HasSubstr("cooperative load pieces of rank 5"));
}

TEST(PieceMessage, TrailingBytesRefused) {
  Result<PieceMessage> m = DecodePieceMessage(EncodePieceMessage(TwoPieces()) + "x", 0);
  EXPECT_EQ(m.status().code(), StatusCode::kDataLoss);
}

TEST(PieceMessage, CountBeyondTheBytesRefusedBeforeAllocating) {
  PieceMessage none;
  std::string bytes = EncodePieceMessage(none);
  bytes[8 + 7] = 0x40;  // count 2^62
  Result<PieceMessage> m = DecodePieceMessage(bytes, 0);
  EXPECT_EQ(m.status().code(), StatusCode::kDataLoss);
}

TEST(PieceMessage, OffsetAndShapeOfDifferentRanksRefused) {
  PieceMessage m = TwoPieces();
  m.pieces[0].in_chunk.shape = {4};
  Result<PieceMessage> d = DecodePieceMessage(EncodePieceMessage(m), 2);
  ASSERT_EQ(d.status().code(), StatusCode::kDataLoss);
  EXPECT_THAT(d.status().message(), HasSubstr("piece 0 is malformed"));
}

TEST(PieceMessage, NegativeIndexRefused) {
  PieceMessage m = TwoPieces();
  m.pieces[1].chunk = -1;
  EXPECT_EQ(DecodePieceMessage(EncodePieceMessage(m), 2).status().code(), StatusCode::kDataLoss);
}

TEST(ChecksumMessage, RoundTrips) {
  const std::vector<uint64_t> sums = {1, 2, 3};
  const std::vector<std::vector<uint64_t>> blocks = {{7, 8}, {9}};
  std::vector<std::vector<uint64_t>> got_blocks;
  Result<std::vector<uint64_t>> got =
      DecodeChecksums(EncodeChecksums(sums, blocks), 3, 1, &got_blocks);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, sums);
  EXPECT_EQ(got_blocks, blocks);
}

TEST(ChecksumMessage, WrongCountNamesTheRank) {
  std::vector<std::vector<uint64_t>> blocks;
  Result<std::vector<uint64_t>> got = DecodeChecksums(EncodeChecksums({1, 2}, {}), 3, 4, &blocks);
  ASSERT_EQ(got.status().code(), StatusCode::kInternal);
  EXPECT_THAT(got.status().message(), HasSubstr("rank 4 sent 2 checksums, expected 3"));
}

TEST(ChecksumMessage, MoreBlockListsThanItemsRefused) {
  std::vector<std::vector<uint64_t>> blocks;
  EXPECT_EQ(DecodeChecksums(EncodeChecksums({1}, {{1}, {2}}), 1, 0, &blocks).status().code(),
            StatusCode::kInternal);
}

TEST(ChecksumMessage, TruncatedAndTrailingRefused) {
  const std::string bytes = EncodeChecksums({1, 2}, {{3}});
  std::vector<std::vector<uint64_t>> blocks;
  Result<std::vector<uint64_t>> cut =
      DecodeChecksums(std::string_view(bytes).substr(0, bytes.size() - 1), 2, 6, &blocks);
  ASSERT_EQ(cut.status().code(), StatusCode::kDataLoss);
  EXPECT_THAT(cut.status().message(), HasSubstr("checksums from rank 6"));
  EXPECT_EQ(DecodeChecksums(bytes + "\x01", 2, 6, &blocks).status().code(), StatusCode::kDataLoss);
}

}  // namespace
}  // namespace shardpoint::internal_checkpoint
