#include "src/local/overlay.h"

#include <algorithm>
#include <cstring>

#include "src/base/stream_copy.h"
#include "src/io/memory_view.h"
#include "src/io/path.h"

namespace shardpoint::internal_local {
namespace {

class OverlayFile : public ReadableFile, public internal_io::MemoryView {
 public:
  OverlayFile(std::string path, std::unique_ptr<ReadableFile> base, uint64_t extent,
              const std::map<uint64_t, std::string_view>* units)
      : path_(std::move(path)), base_(std::move(base)), extent_(extent), units_(units) {}

  Status ReadAt(uint64_t offset, size_t n, void* dst) const override {
    char* out = static_cast<char*>(dst);
    if (base_) {
      // The node's copy may fail where units replace it (a copy cut short,
      // its units received from a peer): only a byte no unit covers needs it.
      Status read = base_->ReadAt(offset, n, dst);
      if (!read.ok() && !Covered(offset, n)) return read;
    } else {
      if (offset + n > extent_) {
        return DataLossError("'" + path_ + "': bytes [" + std::to_string(offset) + ", " +
                             std::to_string(offset + n) + ") lie beyond its " +
                             std::to_string(extent_) + " bytes");
      }
    }
    // Units overlapping [offset, offset + n): the last starting before the
    // range, then every one starting inside it. Without a base file the
    // bytes no unit covers are zeros (written once: no memset under the
    // units).
    uint64_t done = offset;
    auto it = units_->upper_bound(offset);
    if (it != units_->begin()) --it;
    for (; it != units_->end() && it->first < offset + n; ++it) {
      const uint64_t a = std::max(offset, it->first);
      const uint64_t b = std::min<uint64_t>(offset + n, it->first + it->second.size());
      if (a >= b) continue;
      if (!base_ && a > done) std::memset(out + (done - offset), 0, a - done);
      // A recovery reads units into their destination tensors here.
      internal_base::StreamCopy(out + (a - offset), it->second.data() + (a - it->first), b - a);
      done = std::max(done, b);
    }
    if (!base_ && done < offset + n) std::memset(out + (done - offset), 0, offset + n - done);
    return OkStatus();
  }
  // Whether units cover every byte of [offset, offset + n).
  bool Covered(uint64_t offset, size_t n) const {
    uint64_t done = offset;
    auto it = units_->upper_bound(offset);
    if (it != units_->begin()) --it;
    for (; it != units_->end() && it->first <= done && done < offset + n; ++it) {
      done = std::max<uint64_t>(done, it->first + it->second.size());
    }
    return done >= offset + n;
  }
  // Without a node copy under it: the range inside units that lie end to end
  // in memory (a mapping's, or a message's, consecutive units).
  const char* View(uint64_t offset, size_t n) const override {
    if (base_ || n == 0) return nullptr;
    auto it = units_->upper_bound(offset);
    if (it == units_->begin()) return nullptr;
    --it;
    if (offset >= it->first + it->second.size()) return nullptr;
    const char* start = it->second.data() + (offset - it->first);
    uint64_t end = it->first + it->second.size();  // file bytes covered so far
    const char* next = it->second.data() + it->second.size();
    while (end < offset + n) {
      ++it;
      if (it == units_->end() || it->first != end || it->second.data() != next) return nullptr;
      end += it->second.size();
      next += it->second.size();
    }
    return start;
  }
  // A node copy cut short still reaches the end of the units (which the
  // reads of bytes no unit covers then refuse).
  Result<uint64_t> Size() const override {
    if (!base_) return extent_;
    SP_ASSIGN_OR_RETURN(const uint64_t size, base_->Size());
    return std::max(size, extent_);
  }
  const std::string& path() const override { return path_; }
  void Prefetch(uint64_t offset, size_t n) const override {
    if (base_) base_->Prefetch(offset, n);
  }

 private:
  std::string path_;
  std::unique_ptr<ReadableFile> base_;
  uint64_t extent_;
  const std::map<uint64_t, std::string_view>* units_;
};

}  // namespace

Result<std::unique_ptr<ReadableFile>> OverlayStorage::NewReadableFile(const std::string& path) {
  for (size_t f = 0; f < files_->names.size(); ++f) {
    if (internal_io::JoinPath(files_->dir, files_->names[f]) != path) continue;
    std::unique_ptr<ReadableFile> base;
    if (files_->held[f]) {
      SP_ASSIGN_OR_RETURN(base, StorageWrapper::NewReadableFile(path));
    }
    return std::unique_ptr<ReadableFile>(
        new OverlayFile(path, std::move(base), files_->extent[f], &files_->units[f]));
  }
  return StorageWrapper::NewReadableFile(path);
}

}  // namespace shardpoint::internal_local
