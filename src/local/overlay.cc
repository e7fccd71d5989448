#include "src/local/overlay.h"

#include <algorithm>
#include <cstring>

#include "src/io/path.h"

namespace shardpoint::internal_local {
namespace {

class OverlayFile : public ReadableFile {
 public:
  OverlayFile(std::string path, std::unique_ptr<ReadableFile> base, uint64_t extent,
              const std::map<uint64_t, std::string_view>* units)
      : path_(std::move(path)), base_(std::move(base)), extent_(extent), units_(units) {}

  Status ReadAt(uint64_t offset, size_t n, void* dst) const override {
    char* out = static_cast<char*>(dst);
    if (base_) {
      SP_RETURN_IF_ERROR(base_->ReadAt(offset, n, dst));
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
      std::memcpy(out + (a - offset), it->second.data() + (a - it->first), b - a);
      done = std::max(done, b);
    }
    if (!base_ && done < offset + n) std::memset(out + (done - offset), 0, offset + n - done);
    return OkStatus();
  }
  Result<uint64_t> Size() const override {
    return base_ ? base_->Size() : Result<uint64_t>(extent_);
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
