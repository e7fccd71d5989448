// The POSIX Storage: pread/pwrite on file descriptors, O_DIRECT on request.
//
// errno becomes a Status only through ErrnoStatus() (src/io/errno_status.h),
// so every OS failure reads the same way: "<operation> <path>[ at bytes
// [a, b)]: <strerror>".
#include <dirent.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <system_error>
#include <utility>

#include "shardpoint/storage.h"
#include "src/io/errno_status.h"
#include "src/io/file_map.h"
#include "src/io/overwrite_open.h"
#include "src/io/remove_tree.h"

namespace shardpoint {
namespace {

constexpr size_t kDirectAlignment = 4096;

// In a function returning Result<bool>: returns an error as is, and false
// where the call (a Result<int64_t>) says the kernel refused O_DIRECT (-1).
#define SP_RETURN_IF_ERROR_OR_REFUSED(expr) \
  do {                                      \
    Result<int64_t> sp_r_ = (expr);         \
    if (!sp_r_.ok()) return sp_r_.status(); \
    if (*sp_r_ < 0) return false;           \
  } while (0)

Status PosixError(const std::string& context, int err) {
  return internal_io::ErrnoStatus(context, err);
}

std::string Range(uint64_t offset, uint64_t n) {
  return "[" + std::to_string(offset) + ", " + std::to_string(offset + n) + ")";
}

const char* FileKind(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "not a regular file";
}

// Only regular files are read or written: a FIFO, device or directory where a
// checkpoint file belongs would block or mislead. On success clears the
// O_NONBLOCK the file was opened with; on failure closes `fd`.
Status CheckRegular(const std::string& path, const char* purpose, int fd) {
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return PosixError("stat " + path, err);
  }
  if (S_ISDIR(st.st_mode)) {  // as open(2) says it for writing: "Is a directory"
    ::close(fd);
    return PosixError("open " + path + " for " + purpose, EISDIR);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return IOError("open " + path + " for " + purpose + ": not a regular file (" +
                   FileKind(st.st_mode) + ")");
  }
  const int fl = ::fcntl(fd, F_GETFL);
  if (fl < 0 || ::fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
    const int err = errno;
    ::close(fd);
    return PosixError("open " + path + " for " + purpose, err);
  }
  return OkStatus();
}

// Opens `path` read-only, refused unless a regular file. O_NONBLOCK: opening
// a FIFO must not wait for a writer (CheckRegular refuses it, then clears it).
Result<int> OpenRegularForReading(const std::string& path) {
  int fd;
  do {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return PosixError("open " + path + " for reading", errno);
  SP_RETURN_IF_ERROR(CheckRegular(path, "reading", fd));
  return fd;
}

class PosixWritableFile : public WritableFile {
 public:
  PosixWritableFile(std::string path, int fd, bool direct)
      : path_(std::move(path)), fd_(fd), direct_(direct) {}
  ~PosixWritableFile() override { Close().IgnoreError(); }

  Status WriteAt(uint64_t offset, const void* data, size_t n) override {
    SP_RETURN_IF_ERROR(CheckOpen("write"));
    if (direct_ && (offset % kDirectAlignment != 0 || n % kDirectAlignment != 0 ||
                    reinterpret_cast<uintptr_t>(data) % kDirectAlignment != 0)) {
      return InvalidArgumentError("write " + path_ + " at bytes " + Range(offset, n) +
                                  ": O_DIRECT needs offset, size and buffer aligned to " +
                                  std::to_string(kDirectAlignment));
    }
    const char* p = static_cast<const char*>(data);
    size_t done = 0;
    while (done < n) {
      ssize_t r = ::pwrite(fd_, p + done, n - done, static_cast<off_t>(offset + done));
      if (r < 0) {
        if (errno == EINTR) continue;
        return PosixError("write " + path_ + " at bytes " + Range(offset + done, n - done), errno);
      }
      // pwrite returning 0 for a non-empty request means the device accepts
      // no more; report it like the ENOSPC it almost certainly is.
      if (r == 0) {
        return PosixError("write " + path_ + " at bytes " + Range(offset + done, n - done), ENOSPC);
      }
      done += static_cast<size_t>(r);
    }
    return OkStatus();
  }

  Status Truncate(uint64_t size) override {
    SP_RETURN_IF_ERROR(CheckOpen("truncate"));
    if (::ftruncate(fd_, static_cast<off_t>(size)) != 0) {
      return PosixError("truncate " + path_ + " to " + std::to_string(size) + " bytes", errno);
    }
    return OkStatus();
  }

  // fallocate(2), not posix_fallocate(3): where the filesystem lacks it, glibc
  // would emulate it by writing zeros, doubling the bytes written. On tmpfs
  // and ramfs fallocate zeroes every page up front (measured: 70 ms for 90 MB,
  // a quarter of a save to /dev/shm), pages the writes fill anyway and that
  // cannot fragment: there only the free space is checked.
  Status Reserve(uint64_t size) override {
    SP_RETURN_IF_ERROR(CheckOpen("reserve space for"));
    if (size == 0) return OkStatus();
    struct statfs fs;
    if (::fstatfs(fd_, &fs) == 0 && (fs.f_type == TMPFS_MAGIC || fs.f_type == RAMFS_MAGIC)) {
      if (fs.f_type == TMPFS_MAGIC && fs.f_blocks > 0 &&
          size / static_cast<uint64_t>(fs.f_bsize) > static_cast<uint64_t>(fs.f_bavail)) {
        return PosixError("reserve " + std::to_string(size) + " bytes for " + path_, ENOSPC);
      }
      return OkStatus();
    }
    while (::fallocate(fd_, 0, 0, static_cast<off_t>(size)) != 0) {
      if (errno == EINTR) continue;
      if (errno == EOPNOTSUPP || errno == ENOSYS) return OkStatus();
      return PosixError("reserve " + std::to_string(size) + " bytes for " + path_, errno);
    }
    return OkStatus();
  }

  // fsync, not fdatasync: after Truncate the new size is metadata that
  // fdatasync may leave behind.
  Status Sync() override {
    SP_RETURN_IF_ERROR(CheckOpen("fsync"));
    if (::fsync(fd_) != 0) return PosixError("fsync " + path_, errno);
    return OkStatus();
  }

  Status Close() override {
    if (fd_ < 0) return OkStatus();
    int fd = std::exchange(fd_, -1);
    // No retry on EINTR: on Linux the descriptor is released regardless.
    if (::close(fd) != 0) return PosixError("close " + path_, errno);
    return OkStatus();
  }

  bool direct() const override { return direct_; }
  size_t alignment() const override { return direct_ ? kDirectAlignment : 1; }
  const std::string& path() const override { return path_; }

 private:
  Status CheckOpen(const char* op) const {
    if (fd_ >= 0) return OkStatus();
    return FailedPreconditionError(std::string(op) + " " + path_ + ": file is closed");
  }

  const std::string path_;
  int fd_;
  const bool direct_;
};

class PosixReadableFile : public ReadableFile {
 public:
  // `direct_fd`: the same file opened with O_DIRECT, or -1.
  PosixReadableFile(std::string path, int fd, int direct_fd = -1)
      : path_(std::move(path)), fd_(fd), direct_fd_(direct_fd) {}
  ~PosixReadableFile() override {
    ::close(fd_);
    if (direct_fd_ >= 0) ::close(direct_fd_);
  }

  Status ReadAt(uint64_t offset, size_t n, void* dst) const override {
    if (direct()) {
      Result<bool> done = ReadDirect(offset, n, static_cast<char*>(dst));
      if (!done.ok() || *done) return done.status();
    }
    return ReadBuffered(offset, n, dst);
  }

  Result<uint64_t> Size() const override {
    struct stat st;
    if (::fstat(fd_, &st) != 0) return PosixError("stat " + path_, errno);
    return static_cast<uint64_t>(st.st_size);
  }

  const std::string& path() const override { return path_; }
  bool direct() const override { return direct_fd_ >= 0 && !refused_.load(); }

  // A direct file bypasses the page cache: a WILLNEED hint would fill it.
  void Prefetch(uint64_t offset, size_t n) const override {
    if (direct()) return;
    (void)::posix_fadvise(fd_, static_cast<off_t>(offset), static_cast<off_t>(n),
                          POSIX_FADV_WILLNEED);
  }

 private:
  Status ShortRead(uint64_t offset, size_t n) const {
    Result<uint64_t> size = Size();
    std::string have = size.ok() ? std::to_string(*size) : "an unknown number of";
    return DataLossError("file " + path_ + ": short read at bytes " + Range(offset, n) +
                         ": file has only " + have + " bytes");
  }

  // O_DIRECT reads of [offset, offset + n): the aligned middle straight into
  // dst where dst and offset are aligned alike, the rest (an unaligned head
  // or tail, or all of it) through a thread's aligned bounce buffer. false:
  // the kernel refused an O_DIRECT read (EINVAL), so this and every later
  // read of the file go buffered.
  Result<bool> ReadDirect(uint64_t offset, size_t n, char* dst) const {
    constexpr uint64_t kA = kDirectAlignment;
    const uint64_t end = offset + n;
    const bool congruent = (reinterpret_cast<uintptr_t>(dst) - offset) % kA == 0;
    const uint64_t mid_lo = congruent ? std::min(end, (offset + kA - 1) / kA * kA) : end;
    const uint64_t mid_hi = congruent ? std::max(mid_lo, end / kA * kA) : end;
    if (offset < mid_lo) SP_RETURN_IF_ERROR_OR_REFUSED(Bounced(offset, mid_lo, dst));
    if (mid_lo < mid_hi) {
      SP_RETURN_IF_ERROR_OR_REFUSED(Direct(mid_lo, mid_hi - mid_lo, dst + (mid_lo - offset), end));
    }
    if (mid_hi < end) SP_RETURN_IF_ERROR_OR_REFUSED(Bounced(mid_hi, end, dst + (mid_hi - offset)));
    return true;
  }

  // One O_DIRECT pread loop of aligned [at, at + len) into aligned mem. Fewer
  // bytes than asked are fine only at the end of the file, past `need`.
  // Returns the bytes read, or -1 where the kernel refused (EINVAL).
  Result<int64_t> Direct(uint64_t at, uint64_t len, char* mem, uint64_t need) const {
    uint64_t done = 0;
    while (done < len) {
      ssize_t r = ::pread(direct_fd_, mem + done, len - done, static_cast<off_t>(at + done));
      if (r < 0) {
        if (errno == EINTR) continue;
        if (errno == EINVAL && done == 0) {
          refused_ = true;
          return int64_t{-1};
        }
        return PosixError("read " + path_ + " at bytes " + Range(at + done, len - done), errno);
      }
      if (r == 0) break;
      done += static_cast<uint64_t>(r);
    }
    if (at + done < std::min(need, at + len)) return ShortRead(at, std::min(need, at + len) - at);
    return static_cast<int64_t>(done);
  }

  // [a, b) through the bounce buffer, in pieces of at most its size.
  Result<int64_t> Bounced(uint64_t a, uint64_t b, char* dst) const {
    constexpr uint64_t kA = kDirectAlignment;
    constexpr uint64_t kBounce = uint64_t{1} << 20;
    thread_local std::unique_ptr<char, void (*)(void*)> bounce(nullptr, std::free);
    if (!bounce) {
      bounce.reset(static_cast<char*>(std::aligned_alloc(kA, kBounce)));
      if (!bounce) throw std::bad_alloc();
    }
    for (uint64_t at = a; at < b;) {
      const uint64_t lo = at / kA * kA;
      const uint64_t hi = std::min(lo + kBounce, (b + kA - 1) / kA * kA);
      SP_ASSIGN_OR_RETURN(int64_t got, Direct(lo, hi - lo, bounce.get(), b));
      if (got < 0) return got;
      const uint64_t to = std::min(b, hi);
      std::memcpy(dst + (at - a), bounce.get() + (at - lo), to - at);
      at = to;
    }
    return int64_t{0};
  }

  Status ReadBuffered(uint64_t offset, size_t n, void* dst) const {
    char* p = static_cast<char*>(dst);
    size_t done = 0;
    while (done < n) {
      ssize_t r = ::pread(fd_, p + done, n - done, static_cast<off_t>(offset + done));
      if (r < 0) {
        if (errno == EINTR) continue;
        return PosixError("read " + path_ + " at bytes " + Range(offset + done, n - done), errno);
      }
      if (r == 0) return ShortRead(offset, n);
      done += static_cast<size_t>(r);
    }
    return OkStatus();
  }

  const std::string path_;
  const int fd_;
  const int direct_fd_;
  mutable std::atomic<bool> refused_{false};
};

class PosixFileLock : public FileLock {
 public:
  PosixFileLock(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  ~PosixFileLock() override { ::close(fd_); }  // closing the description drops the lock
  const std::string& path() const override { return path_; }
  int fd() const { return fd_; }

 private:
  const std::string path_;
  const int fd_;
};

std::string Hostname() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "unknown-host";
  return buf;
}

// Who holds the lock on `fd`'s file, as its holder wrote it: "pid <pid> on
// host '<host>'", or what the file says instead.
std::string DescribeHolder(int fd) {
  char buf[512];
  ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  if (n <= 0) return "another process (the lock file names no holder yet)";
  std::string text(buf, static_cast<size_t>(n));
  long pid = 0;
  char host[256] = {};
  if (std::sscanf(text.c_str(), "pid %ld host %255s", &pid, host) == 2) {
    return "pid " + std::to_string(pid) + " on host '" + host + "'";
  }
  while (!text.empty() && text.back() == '\n') text.pop_back();
  return "an unknown holder ('" + text + "')";
}

// An open file description lock on the whole file: owned by the description,
// so it conflicts with every other open of the file (in this process too)
// and the kernel drops it when the last descriptor closes, process death
// included.
int TryLock(int fd, short type) {
  struct flock fl = {};
  fl.l_type = type;
  fl.l_whence = SEEK_SET;
  int r;
  do {
    r = ::fcntl(fd, F_OFD_SETLK, &fl);
  } while (r != 0 && errno == EINTR);
  return r;
}

// The directory holding `path`'s last component: "." for a bare name, "/"
// for one at the root. REQUIRES: `path` does not end with '/'.
std::string ParentDir(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  size_t end = path.find_last_not_of('/', slash);
  return end == std::string::npos ? "/" : path.substr(0, end + 1);
}

class PosixStorage : public Storage,
                     public internal_io::OverwriteOpener,
                     public internal_io::FileMapper {
 public:
  Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path,
                                                        const WriteFileOptions& options) override {
    return Open(path, options.direct, O_TRUNC);
  }

  Result<std::unique_ptr<WritableFile>> OpenForOverwrite(const std::string& path) override {
    return Open(path, false, 0);
  }

 private:
  // `trunc`: O_TRUNC, or 0 to keep the file's bytes.
  Result<std::unique_ptr<WritableFile>> Open(const std::string& path, bool direct, int trunc) {
    // O_NOFOLLOW: never write through a link planted where a file goes.
    // O_NONBLOCK: a FIFO there fails (ENXIO) or is refused below instead of
    // blocking the open until some reader appears.
    const int flags = O_WRONLY | O_CREAT | trunc | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK;
    int fd = -1;
    if (direct) {
      fd = ::open(path.c_str(), flags | O_DIRECT, 0644);
      // tmpfs and some network filesystems refuse O_DIRECT with EINVAL; the
      // caller asked for speed, not for failure, so fall back to buffered.
      if (fd < 0 && errno == EINVAL) direct = false;
    }
    if (!direct) {
      do {
        fd = ::open(path.c_str(), flags, 0644);
      } while (fd < 0 && errno == EINTR);
    }
    if (fd < 0) return PosixError("open " + path + " for writing", errno);
    SP_RETURN_IF_ERROR(CheckRegular(path, "writing", fd));
    return std::unique_ptr<WritableFile>(new PosixWritableFile(path, fd, direct));
  }

 public:
  Result<std::unique_ptr<ReadableFile>> NewReadableFile(const std::string& path) override {
    SP_ASSIGN_OR_RETURN(const int fd, OpenRegularForReading(path));
    return std::unique_ptr<ReadableFile>(new PosixReadableFile(path, fd));
  }

  Result<std::unique_ptr<internal_io::MappedFile>> MapFile(const std::string& path) override {
    SP_ASSIGN_OR_RETURN(const int fd, OpenRegularForReading(path));
    Result<std::unique_ptr<internal_io::MappedFile>> m = internal_io::MappedFile::Map(path, fd);
    ::close(fd);  // the mapping keeps the file
    return m;
  }

  // The buffered descriptor is checked first (a FIFO or directory is refused
  // as above); the O_DIRECT one is then opened on the same file, or, where
  // the filesystem refuses O_DIRECT (EINVAL: older tmpfs, some network
  // filesystems), the file reads buffered.
  Result<std::unique_ptr<ReadableFile>> NewDirectReadableFile(const std::string& path) override {
    SP_ASSIGN_OR_RETURN(const int fd, OpenRegularForReading(path));
    int direct_fd;
    do {
      direct_fd =
          ::open(("/proc/self/fd/" + std::to_string(fd)).c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
    } while (direct_fd < 0 && errno == EINTR);
    return std::unique_ptr<ReadableFile>(
        new PosixReadableFile(path, fd, direct_fd >= 0 ? direct_fd : -1));
  }

  // mkdir -p that leaves what it creates durable: each prefix is created in
  // turn, accepting those that exist as directories (possibly created
  // concurrently by another rank), and each one created is followed by an
  // fsync of its parent, so that the entry naming it survives a power loss.
  // Top-down, one parent at a time: a crash at any step leaves a durable
  // chain from the existing ancestor down, never a synced directory under a
  // parent whose entry for it was lost. Prefixes that existed cost no fsync;
  // one created by a concurrent rank is synced by that rank before its own
  // CreateDirs returns (and a save commits only after every rank's returned).
  Status CreateDirs(const std::string& path) override {
    for (size_t end = 0; end != std::string::npos;) {
      end = path.find('/', end + 1);
      std::string prefix = path.substr(0, end);
      if (prefix.empty() || prefix.back() == '/') continue;
      if (::mkdir(prefix.c_str(), 0755) == 0) {
        SP_RETURN_IF_ERROR(SyncDir(ParentDir(prefix)));
        continue;
      }
      int err = errno;
      struct stat st;
      if (err == EEXIST && ::stat(prefix.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) continue;
      return PosixError("create directory " + prefix, err == EEXIST ? ENOTDIR : err);
    }
    return OkStatus();
  }

  Status SyncDir(const std::string& path) override {
    int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return PosixError("open directory " + path, errno);
    Status status;
    if (::fsync(fd) != 0) status = PosixError("fsync directory " + path, errno);
    ::close(fd);
    return status;
  }

  Status Rename(const std::string& from, const std::string& to) override {
    if (::rename(from.c_str(), to.c_str()) != 0) {
      return PosixError("rename " + from + " to " + to, errno);
    }
    return OkStatus();
  }

  Result<bool> Exchange(const std::string& a, const std::string& b) override {
    if (::renameat2(AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(), RENAME_EXCHANGE) == 0) return true;
    const int err = errno;
    if (err == EINVAL || err == ENOSYS || err == ENOTSUP) return false;  // fs cannot
    return PosixError("exchange " + a + " and " + b, err);
  }

  Status RemoveFile(const std::string& path) override {
    if (::unlink(path.c_str()) != 0) return PosixError("remove " + path, errno);
    return OkStatus();
  }

  Status RemoveAll(const std::string& path) override { return internal_io::RemoveTree(path); }

  Result<bool> Exists(const std::string& path) override {
    struct stat st;
    if (::stat(path.c_str(), &st) == 0) return true;
    if (errno == ENOENT || errno == ENOTDIR) return false;
    return PosixError("stat " + path, errno);
  }

  Result<bool> IsDirectory(const std::string& path) override {
    struct stat st;
    if (::stat(path.c_str(), &st) == 0) return S_ISDIR(st.st_mode);
    if (errno == ENOENT || errno == ENOTDIR) return false;
    return PosixError("stat " + path, errno);
  }

  Result<std::vector<std::string>> ListDir(const std::string& path) override {
    DIR* dir = ::opendir(path.c_str());
    if (dir == nullptr) return PosixError("list directory " + path, errno);
    std::vector<std::string> names;
    for (;;) {
      errno = 0;
      struct dirent* entry = ::readdir(dir);
      if (entry == nullptr) break;
      std::string name = entry->d_name;
      if (name != "." && name != "..") names.push_back(std::move(name));
    }
    int err = errno;
    ::closedir(dir);
    if (err != 0) return PosixError("list directory " + path, err);
    std::sort(names.begin(), names.end());
    return names;
  }

  // Open, lock, then check that the path still names the file locked: a
  // holder removes the file before it unlocks (UnlockFile), so a lock won on
  // a removed file is worthless and the open is retried.
  Result<std::unique_ptr<FileLock>> LockFile(const std::string& path) override {
    for (int attempt = 0; attempt < 100; ++attempt) {
      int fd;
      do {
        fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
      } while (fd < 0 && errno == EINTR);
      if (fd < 0) return PosixError("open lock file " + path, errno);
      auto lock = std::make_unique<PosixFileLock>(path, fd);
      if (TryLock(fd, F_WRLCK) != 0) {
        const int err = errno;
        if (err == EAGAIN || err == EACCES) {
          return FailedPreconditionError("lock file '" + path + "' is held by " +
                                         DescribeHolder(fd));
        }
        return PosixError("lock " + path, err);
      }
      struct stat held, named;
      if (::fstat(fd, &held) != 0) return PosixError("stat " + path, errno);
      if (::stat(path.c_str(), &named) != 0) {
        if (errno == ENOENT) continue;  // removed by the holder that just unlocked
        return PosixError("stat " + path, errno);
      }
      if (held.st_dev != named.st_dev || held.st_ino != named.st_ino) continue;
      const std::string holder = "pid " + std::to_string(::getpid()) + " host " + Hostname() + "\n";
      if (::ftruncate(fd, 0) != 0 ||
          ::pwrite(fd, holder.data(), holder.size(), 0) != static_cast<ssize_t>(holder.size())) {
        return PosixError("write lock file " + path, errno);
      }
      return std::unique_ptr<FileLock>(std::move(lock));
    }
    return FailedPreconditionError("lock file '" + path +
                                   "' keeps being replaced by other processes");
  }

  Status UnlockFile(std::unique_ptr<FileLock> lock) override {
    if (lock == nullptr) return OkStatus();
    auto* posix = static_cast<PosixFileLock*>(lock.get());
    Status s;
    if (::unlink(posix->path().c_str()) != 0 && errno != ENOENT) {
      s = PosixError("remove lock file " + posix->path(), errno);
    }
    if (TryLock(posix->fd(), F_UNLCK) != 0 && s.ok()) {
      s = PosixError("unlock " + posix->path(), errno);
    }
    return s;  // the destructor closes the descriptor
  }
};

}  // namespace

Storage* PosixFileStorage() {
  // Never destroyed: file objects and other static destructors may use it.
  static Storage* const storage = new PosixStorage;
  return storage;
}

}  // namespace shardpoint
