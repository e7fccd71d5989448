#include "src/dcp/byte_item_writer.h"

#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "src/dcp/pickle_writer.h"
#include "src/dcp/zip.h"
#include "src/dcp/zip_writer.h"

namespace shardpoint::internal_dcp {
namespace {

constexpr uint64_t kMaxObjectBytes = uint64_t{1} << 30;
constexpr int kMaxDepth = 512;
constexpr size_t kMaxIntDigits = 4300;  // Python's int_max_str_digits default

// Strict UTF-8 (no overlong forms, no surrogates, at most U+10FFFF), as
// Python's bytes.decode("utf-8"): the offset of the first bad byte, or npos.
size_t BadUtf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return i;
    uint32_t cp = n == 1 ? c : c & (0x7F >> n);
    for (size_t k = 1; k < n; ++k) {
      const auto d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (d & 0x3F);
    }
    const uint32_t min[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
    i += n;
  }
  return std::string_view::npos;
}

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// Decimal digits (an optional '-' first) as a little-endian two's complement
// integer, one byte longer than the magnitude needs (so the sign bit is free).
std::string TwosComplement(std::string_view text) {
  const bool neg = !text.empty() && text[0] == '-';
  std::vector<uint8_t> mag;  // little-endian magnitude
  for (char c : text.substr(neg ? 1 : 0)) {
    uint32_t carry = static_cast<uint32_t>(c - '0');
    for (uint8_t& b : mag) {
      const uint32_t v = b * 10u + carry;
      b = static_cast<uint8_t>(v);
      carry = v >> 8;
    }
    while (carry) {
      mag.push_back(static_cast<uint8_t>(carry));
      carry >>= 8;
    }
  }
  mag.push_back(0);
  if (neg) {
    uint32_t carry = 1;
    for (uint8_t& b : mag) {
      const uint32_t v = static_cast<uint8_t>(~b) + carry;
      b = static_cast<uint8_t>(v);
      carry = v >> 8;
    }
  }
  return std::string(mag.begin(), mag.end());
}

// A recursive-descent reader of the JSON that Python's json.loads reads
// (NaN, Infinity and -Infinity included), emitting each value's pickle.
class JsonPickler {
 public:
  JsonPickler(std::string_view in, PickleWriter* p) : in_(in), p_(p) {}

  Status Run() {
    if (size_t bad = BadUtf8(in_); bad != std::string_view::npos) {
      pos_ = bad;
      return Error("not UTF-8");
    }
    Skip();
    SP_RETURN_IF_ERROR(Value(0));
    Skip();
    if (pos_ != in_.size()) return Error("data after the JSON value");
    return OkStatus();
  }

 private:
  Status Error(const std::string& m) const {
    return InvalidArgumentError(m + " at byte " + std::to_string(pos_));
  }
  char Peek() const { return pos_ < in_.size() ? in_[pos_] : '\0'; }
  void Skip() {
    while (pos_ < in_.size() &&
           (in_[pos_] == ' ' || in_[pos_] == '\t' || in_[pos_] == '\n' || in_[pos_] == '\r')) {
      ++pos_;
    }
  }
  bool Lit(std::string_view w) {
    if (in_.substr(pos_, w.size()) != w) return false;
    pos_ += w.size();
    return true;
  }

  Status Value(int depth) {
    if (depth > kMaxDepth) return Error("JSON nested deeper than " + std::to_string(kMaxDepth));
    const char c = Peek();
    if (c == '{' || c == '[') return Container(depth, c == '{');
    if (c == '"') {
      std::string s;
      SP_RETURN_IF_ERROR(String(&s));
      p_->Str(s);
      return OkStatus();
    }
    if (Lit("null")) {
      p_->None();
    } else if (Lit("true")) {
      p_->Bool(true);
    } else if (Lit("false")) {
      p_->Bool(false);
    } else if (Lit("NaN")) {
      p_->Float(std::numeric_limits<double>::quiet_NaN());
    } else if (Lit("Infinity")) {
      p_->Float(std::numeric_limits<double>::infinity());
    } else if (Lit("-Infinity")) {
      p_->Float(-std::numeric_limits<double>::infinity());
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      return Number();
    } else {
      return Error("not a JSON value");
    }
    return OkStatus();
  }

  // An object (dict: key, value pairs) or an array (list).
  Status Container(int depth, bool object) {
    const char close = object ? '}' : ']';
    ++pos_;
    object ? p_->EmptyDict() : p_->EmptyList();
    Skip();
    if (Peek() == close) {
      ++pos_;
      return OkStatus();
    }
    p_->Mark();
    for (;;) {
      Skip();
      if (object) {
        if (Peek() != '"') return Error("expected a string key");
        std::string k;
        SP_RETURN_IF_ERROR(String(&k));
        p_->Str(k);
        Skip();
        if (Peek() != ':') return Error("expected ':'");
        ++pos_;
        Skip();
      }
      SP_RETURN_IF_ERROR(Value(depth + 1));
      Skip();
      if (Peek() == ',') {
        ++pos_;
        continue;
      }
      if (Peek() != close) return Error(std::string("expected ',' or '") + close + "'");
      ++pos_;
      object ? p_->SetItems() : p_->Appends();
      return OkStatus();
    }
  }

  Status Hex4(uint32_t* v) {
    if (pos_ + 4 > in_.size()) return Error("truncated \\u escape");
    *v = 0;
    for (int i = 0; i < 4; ++i) {
      const char h = in_[pos_++];
      const int d = h >= '0' && h <= '9'   ? h - '0'
                    : h >= 'a' && h <= 'f' ? h - 'a' + 10
                    : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                           : -1;
      if (d < 0) return Error("bad \\u escape");
      *v = *v * 16 + static_cast<uint32_t>(d);
    }
    return OkStatus();
  }

  Status String(std::string* out) {
    ++pos_;  // '"'
    for (;;) {
      if (pos_ >= in_.size()) return Error("unterminated string");
      const char c = in_[pos_++];
      if (c == '"') return OkStatus();
      if (static_cast<unsigned char>(c) < 0x20) return Error("control character in a string");
      if (c != '\\') {
        out->push_back(c);
        continue;
      }
      const char e = Peek();
      ++pos_;
      const std::string_view plain = "\"\\/bfnrt", meant = "\"\\/\b\f\n\r\t";
      if (const size_t k = plain.find(e); e != '\0' && k != std::string_view::npos) {
        out->push_back(meant[k]);
        continue;
      }
      if (e != 'u') return Error("bad escape");
      uint32_t cp = 0;
      SP_RETURN_IF_ERROR(Hex4(&cp));
      if (cp >= 0xD800 && cp <= 0xDBFF && Lit("\\u")) {
        uint32_t lo = 0;
        SP_RETURN_IF_ERROR(Hex4(&lo));
        if (lo < 0xDC00 || lo > 0xDFFF) return Error("a lone UTF-16 surrogate escape");
        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
      } else if (cp >= 0xD800 && cp <= 0xDFFF) {
        return Error("a lone UTF-16 surrogate escape");
      }
      AppendUtf8(cp, out);
    }
  }

  bool Digits() {
    const size_t start = pos_;
    while (pos_ < in_.size() && in_[pos_] >= '0' && in_[pos_] <= '9') ++pos_;
    return pos_ > start;
  }

  // The decimal exponent of the number's leading digit, roughly (for a number
  // beyond double: positive means huge): the digits before the point (or
  // minus the zeros after it) plus the exponent, clamped.
  int64_t Magnitude(size_t start, size_t int_end, size_t exp_at) const {
    size_t i = start + (in_[start] == '-');
    int64_t mag = static_cast<int64_t>(int_end - i);
    if (in_[i] == '0') {
      mag = 0;
      for (size_t k = int_end + 1; k < exp_at && in_[k] == '0'; ++k) --mag;
    }
    int64_t e = 0;
    if (exp_at < pos_) {
      size_t k = exp_at + 1;
      const bool neg = in_[k] == '-';
      if (in_[k] == '-' || in_[k] == '+') ++k;
      for (; k < pos_; ++k) e = std::min<int64_t>(e * 10 + (in_[k] - '0'), int64_t{1} << 40);
      if (neg) e = -e;
    }
    return mag + e;
  }

  // -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?: an int without fraction and
  // exponent (any size), else a float (as Python's float() rounds it).
  Status Number() {
    const size_t start = pos_;
    if (Peek() == '-') ++pos_;
    if (Peek() == '0') {
      ++pos_;
    } else if (!Digits()) {
      return Error("not a JSON value");
    }
    const size_t int_end = pos_;
    bool is_float = false;
    if (Peek() == '.' && pos_ + 1 < in_.size() && in_[pos_ + 1] >= '0' && in_[pos_ + 1] <= '9') {
      ++pos_;
      Digits();
      is_float = true;
    }
    const size_t exp_at = pos_;
    if (Peek() == 'e' || Peek() == 'E') {
      ++pos_;
      if (Peek() == '+' || Peek() == '-') ++pos_;
      if (Digits()) {
        is_float = true;
      } else {
        pos_ = exp_at;  // not an exponent: what follows is an error of its own
      }
    }
    const std::string_view text = in_.substr(start, pos_ - start);
    if (!is_float) {
      if (int_end - start > kMaxIntDigits + (text[0] == '-')) {
        return Error("an integer of more than " + std::to_string(kMaxIntDigits) + " digits");
      }
      int64_t v;
      const auto r = std::from_chars(text.data(), text.data() + text.size(), v);
      if (r.ec == std::errc() && r.ptr == text.data() + text.size()) {
        p_->Int(v);
      } else {
        p_->Long(TwosComplement(text));
      }
      return OkStatus();
    }
    double v;
    const auto r = std::from_chars(text.data(), text.data() + text.size(), v);
    if (r.ec == std::errc::result_out_of_range) {
      // Beyond double: Python's float() gives an infinity or a zero.
      v = Magnitude(start, int_end, exp_at) > 0 ? std::numeric_limits<double>::infinity() : 0.0;
      if (text[0] == '-') v = -v;
    } else if (r.ec != std::errc() || r.ptr != text.data() + text.size()) {
      return Error("bad number");
    }
    p_->Float(v);
    return OkStatus();
  }

  std::string_view in_;
  PickleWriter* p_;
  size_t pos_ = 0;
};

}  // namespace

Result<std::string> PickleJson(std::string_view json) {
  PickleWriter p;
  SP_RETURN_IF_ERROR(JsonPickler(json, &p).Run());
  return std::move(p).Finish();
}

std::string TorchSaveArchive(std::string_view data_pkl) {
  constexpr std::string_view kVersion = "3\n";
  ZipLayout z;
  const size_t pkl = z.Add("archive/data.pkl", data_pkl.size(), 64);
  const size_t version = z.Add("archive/version", kVersion.size(), 64);
  z.SetCrc32(pkl, Crc32(0, data_pkl.data(), data_pkl.size()));
  z.SetCrc32(version, Crc32(0, kVersion.data(), kVersion.size()));
  std::string out(z.size(), '\0');
  auto put = [&out](uint64_t at, std::string_view b) { out.replace(at, b.size(), b); };
  put(z.local_offset(pkl), z.LocalHeader(pkl));
  put(z.data_offset(pkl), data_pkl);
  put(z.local_offset(version), z.LocalHeader(version));
  put(z.data_offset(version), kVersion);
  put(z.tail_offset(), z.Tail());
  return out;
}

Result<std::string> EncodeDcpByteItem(std::string_view stored, ObjectSource source,
                                      const std::string& key) {
  if (source == ObjectSource::kDcp) return std::string(stored);
  if (stored.size() > kMaxObjectBytes) {
    return FailedPreconditionError("object '" + key + "' of " + std::to_string(stored.size()) +
                                   " bytes: at most 1 GiB is written as a DCP byte item");
  }
  const char tag = stored.empty() ? '\0' : stored[0];
  if (tag == 'P') return TorchSaveArchive(stored.substr(1));
  if (tag == 'J') {
    Result<std::string> pkl = PickleJson(stored.substr(1));
    if (!pkl.ok()) {
      return FailedPreconditionError("object '" + key +
                                     "' is tagged JSON (the Python package's encoding) but its "
                                     "text is not what json.loads reads: " +
                                     pkl.status().message() + " (not converted)");
    }
    return TorchSaveArchive(*pkl);
  }
  PickleWriter p;
  p.Bytes(tag == 'B' ? stored.substr(1) : stored);
  return TorchSaveArchive(std::move(p).Finish());
}

}  // namespace shardpoint::internal_dcp
