#include "src/dcp/zip_writer.h"

#include <string_view>

#include "src/base/bytes.h"

namespace shardpoint::internal_dcp {
namespace {

using internal_base::ByteWriter;

constexpr uint64_t kLocalSize = 30, kCentralSize = 46;
constexpr uint64_t kZip64EocdSize = 56, kLocatorSize = 20, kEocdSize = 22;
constexpr uint64_t kMax32 = 0xFFFFFFFF;
constexpr uint16_t kVersion = 45;  // 4.5: zip64

// The zip fields, little-endian through the one codec (src/base/bytes.h);
// each value is cut to its field's width, as the format stores it.
void Put16(ByteWriter* w, uint64_t v) { w->U16(static_cast<uint16_t>(v)); }
void Put32(ByteWriter* w, uint64_t v) { w->U32(static_cast<uint32_t>(v)); }
void Put64(ByteWriter* w, uint64_t v) { w->U64(v); }
void PutBytes(ByteWriter* w, std::string_view s) { w->Raw(s.data(), s.size()); }
uint64_t Sat(uint64_t v) { return v >= kMax32 ? kMax32 : v; }

// Zip64 extra bytes in a local header (both sizes, if the size needs them).
uint64_t LocalZip64(uint64_t size) { return size >= kMax32 ? 4 + 16 : 0; }

}  // namespace

size_t ZipLayout::Add(std::string name, uint64_t size, uint64_t align) {
  Entry e;
  e.name = std::move(name);
  e.size = size;
  e.local = end_;
  uint64_t data = e.local + kLocalSize + e.name.size() + LocalZip64(size);
  if (align > 1 && data % align != 0) {
    uint64_t pad = align - data % align;
    if (pad < 4) pad += align;  // a padding field has a 4-byte header
    data += pad;
  }
  e.data = data;
  end_ = data + size;
  entries_.push_back(std::move(e));
  return entries_.size() - 1;
}

std::string ZipLayout::LocalHeader(size_t i) const {
  const Entry& e = entries_[i];
  ByteWriter h;
  Put32(&h, 0x04034b50);
  Put16(&h, kVersion);
  Put16(&h, 0);  // flags
  Put16(&h, 0);  // stored
  Put32(&h, 0);  // time, date
  Put32(&h, e.crc32);
  Put32(&h, Sat(e.size));
  Put32(&h, Sat(e.size));
  Put16(&h, e.name.size());
  Put16(&h, e.data - e.local - kLocalSize - e.name.size());
  PutBytes(&h, e.name);
  if (e.size >= kMax32) {
    Put16(&h, 1);
    Put16(&h, 16);
    Put64(&h, e.size);
    Put64(&h, e.size);
  }
  const uint64_t header = e.local + h.str().size();
  if (header < e.data) {  // padding: an extra field of zeros ("FB", as torch.save writes)
    Put16(&h, 0x4246);
    Put16(&h, e.data - header - 4);
    h.str().append(e.data - header - 4, '\0');
  }
  return std::move(h.str());
}

std::string ZipLayout::CentralDirectory() const {
  ByteWriter d;
  for (const Entry& e : entries_) {
    ByteWriter extra;
    if (e.size >= kMax32) {
      Put64(&extra, e.size);
      Put64(&extra, e.size);
    }
    if (e.local >= kMax32) Put64(&extra, e.local);
    Put32(&d, 0x02014b50);
    Put16(&d, kVersion);  // made by
    Put16(&d, kVersion);  // needed
    Put16(&d, 0);
    Put16(&d, 0);
    Put32(&d, 0);
    Put32(&d, e.crc32);
    Put32(&d, Sat(e.size));
    Put32(&d, Sat(e.size));
    Put16(&d, e.name.size());
    const std::string& x = extra.str();
    Put16(&d, x.empty() ? 0 : x.size() + 4);
    Put16(&d, 0);  // comment
    Put16(&d, 0);  // disk
    Put16(&d, 0);  // internal attributes
    Put32(&d, 0);  // external attributes
    Put32(&d, Sat(e.local));
    PutBytes(&d, e.name);
    if (!x.empty()) {
      Put16(&d, 1);
      Put16(&d, x.size());
      PutBytes(&d, x);
    }
  }
  return std::move(d.str());
}

uint64_t ZipLayout::size() const {
  uint64_t dir = 0;
  for (const Entry& e : entries_) {
    const uint64_t extra = (e.size >= kMax32 ? 16 : 0) + (e.local >= kMax32 ? 8 : 0);
    dir += kCentralSize + e.name.size() + (extra ? extra + 4 : 0);
  }
  return end_ + dir + kZip64EocdSize + kLocatorSize + kEocdSize;
}

std::string ZipLayout::Tail() const {
  ByteWriter t;
  PutBytes(&t, CentralDirectory());
  const uint64_t dir_size = t.str().size(), zip64 = end_ + dir_size, n = entries_.size();
  Put32(&t, 0x06064b50);
  Put64(&t, kZip64EocdSize - 12);
  Put16(&t, kVersion);
  Put16(&t, kVersion);
  Put32(&t, 0);
  Put32(&t, 0);
  Put64(&t, n);
  Put64(&t, n);
  Put64(&t, dir_size);
  Put64(&t, end_);
  Put32(&t, 0x07064b50);
  Put32(&t, 0);
  Put64(&t, zip64);
  Put32(&t, 1);
  Put32(&t, 0x06054b50);
  Put32(&t, 0);  // disks
  Put16(&t, n >= 0xFFFF ? 0xFFFF : n);
  Put16(&t, n >= 0xFFFF ? 0xFFFF : n);
  Put32(&t, Sat(dir_size));
  Put32(&t, Sat(end_));
  Put16(&t, 0);  // comment
  return std::move(t.str());
}

}  // namespace shardpoint::internal_dcp
