#include "src/io/file_map.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <map>
#include <mutex>

#include "src/io/errno_status.h"

namespace shardpoint::internal_io {

struct MappedFile::Region {
  Region(const char* d, uint64_t n) : data(d), size(n) {}
  ~Region() {
    if (size > 0) ::munmap(const_cast<char*>(data), size);
  }
  const char* data;
  uint64_t size;
};

namespace {

// The process's live mappings, by what identifies a file's bytes.
struct Key {
  dev_t dev;
  ino_t ino;
  uint64_t size;
  int64_t mtime_sec, mtime_nsec;
  auto operator<=>(const Key&) const = default;
};
std::mutex g_mu;
std::map<Key, std::weak_ptr<const void>>* g_live = new std::map<Key, std::weak_ptr<const void>>;

}  // namespace

MappedFile::MappedFile(std::string path, std::shared_ptr<const Region> region)
    : path_(std::move(path)), region_(std::move(region)) {}

std::string_view MappedFile::bytes() const { return {region_->data, region_->size}; }

uint64_t MappedFile::size() const { return region_->size; }

Result<std::unique_ptr<MappedFile>> MappedFile::Map(const std::string& path, int fd) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return ErrnoStatus("stat " + path, errno);
  if (!S_ISREG(st.st_mode)) {
    return FailedPreconditionError("map " + path + ": not a regular file");
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  const Key key{st.st_dev, st.st_ino, size, st.st_mtim.tv_sec, st.st_mtim.tv_nsec};
  std::lock_guard<std::mutex> lock(g_mu);
  std::weak_ptr<const void>& slot = (*g_live)[key];
  auto region = std::static_pointer_cast<const Region>(slot.lock());
  if (!region) {
    const char* data = nullptr;
    if (size > 0) {
      // No MAP_POPULATE: the reader maps what it reads (Prefault).
      void* p = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
      if (p == MAP_FAILED) {
        g_live->erase(key);
        return ErrnoStatus("map " + path, errno);
      }
      data = static_cast<const char*>(p);
    }
    region = std::make_shared<const Region>(data, size);
    slot = region;
  }
  // Forget the mappings no one holds any more.
  std::erase_if(*g_live, [](const auto& kv) { return kv.second.expired(); });
  return std::unique_ptr<MappedFile>(new MappedFile(path, std::move(region)));
}

void MappedFile::Prefault(uint64_t offset, uint64_t n) const {
#ifdef MADV_POPULATE_READ
  const uint64_t size = region_->size;
  if (n == 0 || offset >= size) return;
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const uint64_t a = offset / page * page;
  const uint64_t b = std::min(size, offset + n);
  // Only a hint: an error (an old kernel's EINVAL) leaves the reads to fault.
  (void)::madvise(const_cast<char*>(region_->data) + a, b - a, MADV_POPULATE_READ);
#else
  (void)offset;
  (void)n;
#endif
}

MappedFile::~MappedFile() = default;

}  // namespace shardpoint::internal_io
