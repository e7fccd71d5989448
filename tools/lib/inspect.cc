#include "tools/lib/inspect.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

namespace shardpoint::tools {

std::string HumanBytes(uint64_t n) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024 && u < 5) v /= 1024, ++u;
  char buf[32];
  if (u == 0) {
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(n));
  } else {
    std::snprintf(buf, sizeof buf, "%.2f %s", v, kUnits[u]);
  }
  return buf;
}

std::string InspectTable(const internal::Manifest& m, const std::string& dir) {
  size_t key_w = 3;
  for (const auto& t : m.tensors) key_w = std::max(key_w, t.key.size());
  key_w = std::min<size_t>(key_w, 72);
  std::ostringstream os;
  char line[512];
  std::snprintf(line, sizeof line, "%-*s  %-7s  %-22s  %6s  %12s\n", static_cast<int>(key_w), "key",
                "dtype", "global shape", "chunks", "bytes");
  os << line;
  uint64_t total = 0;
  int64_t chunks = 0;
  for (const auto& t : m.tensors) {
    uint64_t bytes = 0;
    for (const auto& c : t.chunks) bytes += c.nbytes;
    total += bytes;
    chunks += t.chunks.size();
    std::snprintf(line, sizeof line, "%-*s  %-7s  %-22s  %6zu  %12s\n", static_cast<int>(key_w),
                  t.key.c_str(), std::string(DTypeName(t.dtype)).c_str(),
                  ShapeToString(t.shape).c_str(), t.chunks.size(), HumanBytes(bytes).c_str());
    os << line;
  }
  uint64_t object_bytes = 0;
  for (const auto& o : m.objects) object_bytes += o.nbytes;
  os << "\ncheckpoint " << dir << " (format v" << m.version << ")\n"
     << "  tensors: " << m.tensors.size() << ", chunks: " << chunks << ", " << HumanBytes(total)
     << "\n"
     << "  objects: " << m.objects.size() << ", " << HumanBytes(object_bytes) << "\n"
     << "  common:  " << (m.has_common ? HumanBytes(m.common.size()) : std::string("none")) << "\n"
     << "  files:   " << m.files.size() << "\n";
  return os.str();
}

std::string VerifyText(const internal::VerifyReport& r, const std::string& dir, double seconds) {
  std::ostringstream os;
  for (const VerifyFault& f : r.faults) os << "FAULT: " << f.message << "\n";
  os << "verified " << dir << ": " << r.manifest.tensors.size() << " tensors, " << r.chunks_checked
     << " chunks, " << r.objects_checked << " objects, " << HumanBytes(r.bytes_checked) << " in "
     << r.manifest.files.size() << " files";
  char buf[64];
  std::snprintf(buf, sizeof buf, " (%.2f s)\n", seconds);
  os << buf;
  if (r.ok()) {
    os << "OK\n";
  } else {
    os << "FAILED: " << r.faults.size() << " fault(s)\n";
  }
  return os.str();
}

}  // namespace shardpoint::tools
