// The layout of an uncompressed ("stored") zip archive written in place:
// entries are added with their sizes first, so every offset (and the size of
// the whole archive) is known before any data is written; the caller writes
// the entries' data where data_offset() says, sets their CRC-32s, then
// writes the local headers and the tail (central directory and end records)
// at their offsets. This is how torch.save archives are streamed into
// .distcp files with bounded memory. Like torch.save, entry data is aligned
// (a padding extra field in the local header), the zip64 end records are
// always written, and zip64 extra fields are used where a value needs them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace shardpoint::internal_dcp {

class ZipLayout {
 public:
  // Adds an entry of `size` bytes whose data starts at a multiple of `align`
  // (a power of two, from the start of the archive). Returns its index.
  size_t Add(std::string name, uint64_t size, uint64_t align = 64);
  void SetCrc32(size_t entry, uint32_t crc) { entries_[entry].crc32 = crc; }

  uint64_t local_offset(size_t entry) const { return entries_[entry].local; }
  uint64_t data_offset(size_t entry) const { return entries_[entry].data; }
  uint64_t tail_offset() const { return end_; }
  uint64_t size() const;  // of the whole archive

  // The bytes at local_offset(entry), up to data_offset(entry).
  std::string LocalHeader(size_t entry) const;
  // The bytes at tail_offset(), up to size().
  std::string Tail() const;

 private:
  struct Entry {
    std::string name;
    uint64_t size = 0, local = 0, data = 0;
    uint32_t crc32 = 0;
  };
  std::string CentralDirectory() const;
  std::vector<Entry> entries_;
  uint64_t end_ = 0;  // where the next local header goes
};

}  // namespace shardpoint::internal_dcp
