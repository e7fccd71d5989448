#include "src/dcp/zip.h"

#include <array>
#include <cstring>
#include <set>

namespace shardpoint::internal_dcp {
namespace {

constexpr uint32_t kEocdSig = 0x06054b50;
constexpr uint32_t kZip64LocatorSig = 0x07064b50;
constexpr uint32_t kZip64EocdSig = 0x06064b50;
constexpr uint32_t kCentralSig = 0x02014b50;
constexpr uint32_t kLocalSig = 0x04034b50;
constexpr uint64_t kEocdSize = 22, kLocatorSize = 20, kZip64EocdSize = 56;
constexpr uint64_t kCentralSize = 46, kLocalSize = 30;

uint16_t U16(const char* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
uint32_t U32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
uint64_t U64(const char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

Status Bad(const std::string& what, uint64_t at, const std::string& m) {
  return DataLossError("'" + what + "': malformed zip at byte " + std::to_string(at) + ": " + m);
}

struct End {
  uint64_t entries = 0;
  uint64_t dir_offset = 0;
  uint64_t dir_size = 0;
  uint64_t dir_limit = 0;  // where the end records begin: the directory ends by here
};

Result<End> ReadEnd(uint64_t size, const ZipReadAt& read, const std::string& what) {
  if (size < kEocdSize) return Bad(what, 0, "shorter than an end of central directory record");
  char e[kEocdSize];
  SP_RETURN_IF_ERROR(read(size - kEocdSize, kEocdSize, e));
  const uint64_t eocd = size - kEocdSize;
  if (U32(e) != kEocdSig) {
    return Bad(what, eocd,
               "no end of central directory record at the end (not a zip, or one with a comment)");
  }
  if (U16(e + 4) != 0 || U16(e + 6) != 0) {
    return FailedPreconditionError("'" + what + "': multi-disk zip archives are not read");
  }
  End end;
  end.entries = U16(e + 10);
  if (U16(e + 8) != U16(e + 10)) return Bad(what, eocd, "entry counts disagree");
  end.dir_size = U32(e + 12);
  end.dir_offset = U32(e + 16);
  end.dir_limit = eocd;
  bool zip64 = false;
  if (eocd >= kLocatorSize) {
    char l[kLocatorSize];
    SP_RETURN_IF_ERROR(read(eocd - kLocatorSize, kLocatorSize, l));
    if (U32(l) == kZip64LocatorSig) {
      zip64 = true;
      const uint64_t loc = eocd - kLocatorSize;
      const uint64_t rec = U64(l + 8);
      if (U32(l + 4) != 0 || U32(l + 16) != 1) {
        return FailedPreconditionError("'" + what + "': multi-disk zip archives are not read");
      }
      if (rec > loc || loc - rec < kZip64EocdSize) {
        return Bad(what, loc,
                   "zip64 end record offset " + std::to_string(rec) + " is outside the archive");
      }
      char z[kZip64EocdSize];
      SP_RETURN_IF_ERROR(read(rec, kZip64EocdSize, z));
      if (U32(z) != kZip64EocdSig)
        return Bad(what, rec, "no zip64 end record where the locator points");
      if (U32(z + 16) != 0 || U32(z + 20) != 0) {
        return FailedPreconditionError("'" + what + "': multi-disk zip archives are not read");
      }
      if (U64(z + 24) != U64(z + 32)) return Bad(what, rec, "zip64 entry counts disagree");
      end.entries = U64(z + 32);
      end.dir_size = U64(z + 40);
      end.dir_offset = U64(z + 48);
      end.dir_limit = rec;
    }
  }
  if (!zip64 &&
      (end.dir_size == 0xFFFFFFFF || end.dir_offset == 0xFFFFFFFF || end.entries == 0xFFFF)) {
    return Bad(what, eocd, "zip64 values without a zip64 end record");
  }
  if (end.dir_offset > end.dir_limit || end.dir_size > end.dir_limit - end.dir_offset) {
    return Bad(what, eocd,
               "central directory [" + std::to_string(end.dir_offset) + ", +" +
                   std::to_string(end.dir_size) + ") is outside the archive");
  }
  if (end.dir_size > kMaxZipDirectoryBytes) {
    return FailedPreconditionError("'" + what + "': zip central directory of " +
                                   std::to_string(end.dir_size) + " bytes (at most " +
                                   std::to_string(kMaxZipDirectoryBytes) + " are read)");
  }
  if (end.entries > end.dir_size / kCentralSize) {
    return Bad(what, eocd,
               std::to_string(end.entries) + " entries cannot fit a central directory of " +
                   std::to_string(end.dir_size) + " bytes");
  }
  return end;
}

// Applies the zip64 extra field (id 1) to the fields saturated at 0xFFFFFFFF.
Status Zip64Extra(std::string_view extra, uint64_t* usize, uint64_t* csize, uint64_t* local,
                  const std::string& what, uint64_t at) {
  const bool need_u = *usize == 0xFFFFFFFF, need_c = *csize == 0xFFFFFFFF,
             need_l = *local == 0xFFFFFFFF;
  size_t p = 0;
  while (p + 4 <= extra.size()) {
    const uint16_t id = U16(extra.data() + p), n = U16(extra.data() + p + 2);
    if (n > extra.size() - p - 4) return Bad(what, at, "extra field overruns its header");
    if (id == 1) {
      std::string_view f = extra.substr(p + 4, n);
      size_t q = 0;
      for (auto [need, field] : {std::pair{need_u, usize}, {need_c, csize}, {need_l, local}}) {
        if (!need) continue;
        if (q + 8 > f.size()) return Bad(what, at, "zip64 extra field is too short");
        *field = U64(f.data() + q);
        q += 8;
      }
      return OkStatus();
    }
    p += 4 + n;
  }
  if (need_u || need_c || need_l) return Bad(what, at, "zip64 sizes without a zip64 extra field");
  return OkStatus();
}

}  // namespace

Result<std::vector<ZipEntry>> ReadZipDirectory(uint64_t size, const ZipReadAt& read,
                                               const std::string& what) {
  SP_ASSIGN_OR_RETURN(End end, ReadEnd(size, read, what));
  std::string dir(end.dir_size, '\0');
  if (!dir.empty()) SP_RETURN_IF_ERROR(read(end.dir_offset, dir.size(), dir.data()));
  std::vector<ZipEntry> out;
  out.reserve(end.entries);
  std::set<std::string> names;
  size_t p = 0;
  for (uint64_t i = 0; i < end.entries; ++i) {
    const uint64_t at = end.dir_offset + p;
    if (dir.size() - p < kCentralSize) return Bad(what, at, "central directory is truncated");
    const char* h = dir.data() + p;
    if (U32(h) != kCentralSig) return Bad(what, at, "no central directory header");
    const uint16_t flags = U16(h + 8), method = U16(h + 10);
    const uint64_t name_len = U16(h + 28), extra_len = U16(h + 30), comment_len = U16(h + 32);
    if (dir.size() - p - kCentralSize < name_len + extra_len + comment_len) {
      return Bad(what, at, "central directory header overruns the directory");
    }
    ZipEntry e;
    e.name.assign(h + kCentralSize, name_len);
    e.crc32 = U32(h + 16);
    uint64_t csize = U32(h + 20), usize = U32(h + 24), local = U32(h + 42);
    SP_RETURN_IF_ERROR(Zip64Extra(std::string_view(h + kCentralSize + name_len, extra_len), &usize,
                                  &csize, &local, what, at));
    if (flags & 1) {
      return FailedPreconditionError("'" + what + "': zip entry '" + e.name + "' is encrypted");
    }
    if (method != 0) {
      return FailedPreconditionError("'" + what + "': zip entry '" + e.name +
                                     "' is compressed (method " + std::to_string(method) +
                                     "); only stored entries are read");
    }
    if (csize != usize) return Bad(what, at, "stored entry '" + e.name + "' has two sizes");
    if (U16(h + 34) != 0) return Bad(what, at, "entry '" + e.name + "' on another disk");
    if (!names.insert(e.name).second) return Bad(what, at, "entry '" + e.name + "' twice");
    // The local header: its name and extra lengths place the data.
    if (local > end.dir_offset || end.dir_offset - local < kLocalSize) {
      return Bad(what, at, "entry '" + e.name + "' local header is outside the archive");
    }
    char l[kLocalSize];
    SP_RETURN_IF_ERROR(read(local, kLocalSize, l));
    if (U32(l) != kLocalSig) return Bad(what, local, "no local header for '" + e.name + "'");
    const uint64_t lname = U16(l + 26), lextra = U16(l + 28);
    if (lname != name_len) return Bad(what, local, "local header names another entry");
    const uint64_t data = local + kLocalSize + lname + lextra;
    if (data > end.dir_offset || usize > end.dir_offset - data) {
      return Bad(what, local,
                 "entry '" + e.name + "' data [" + std::to_string(data) + ", +" +
                     std::to_string(usize) + ") runs past the entries into the central directory");
    }
    std::string lname_bytes(lname, '\0');
    if (lname) SP_RETURN_IF_ERROR(read(local + kLocalSize, lname, lname_bytes.data()));
    if (lname_bytes != e.name) return Bad(what, local, "local header names another entry");
    e.data_offset = data;
    e.size = usize;
    out.push_back(std::move(e));
    p += kCentralSize + name_len + extra_len + comment_len;
  }
  return out;
}

uint32_t Crc32(uint32_t crc, const char* data, size_t n) {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  crc = ~crc;
  for (size_t i = 0; i < n; ++i)
    crc = table[(crc ^ static_cast<uint8_t>(data[i])) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

namespace {

// Product of two polynomials modulo the CRC-32 polynomial, in the reflected
// bit order zip's CRC uses (bit 31 is x^0).
uint32_t MulModP(uint32_t a, uint32_t b) {
  uint32_t p = 0;
  for (uint32_t bit = 0x80000000u; bit != 0; bit >>= 1) {
    if (a & bit) p ^= b;
    b = (b & 1) ? (b >> 1) ^ 0xEDB88320u : b >> 1;  // b *= x
  }
  return p;
}

}  // namespace

uint32_t Crc32Combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b) {
  // crc(A || B) = crc_a * x^(8 len_b) + crc_b: the pre- and post-inversions
  // of both cancel out.
  uint32_t power = 0x80000000u;   // x^0
  uint32_t square = 0x00800000u;  // x^8
  for (uint64_t n = len_b; n != 0; n >>= 1) {
    if (n & 1) power = MulModP(power, square);
    square = MulModP(square, square);
  }
  return MulModP(crc_a, power) ^ crc_b;
}

}  // namespace shardpoint::internal_dcp
