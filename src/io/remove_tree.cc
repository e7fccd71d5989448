#include "src/io/remove_tree.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <utility>
#include <vector>

#include "src/io/errno_status.h"

namespace shardpoint::internal_io {
namespace {

// Deeper than any checkpoint: a tree this deep is refused, not recursed into.
constexpr int kMaxDepth = 64;

constexpr char kHeldOpen[] =
    "a network or FUSE filesystem keeps a removed file that some process still holds open under "
    "a name like .nfsXXXX or .fuse_hiddenXXXX until it is closed";

// Such a name is what a removed, still open file became.
bool HeldOpenName(const std::string& path) {
  const std::string name = path.substr(path.find_last_of('/') + 1);
  return name.starts_with(".nfs") || name.starts_with(".fuse_hidden");
}

// Every failure to remove is an IOError (a name already gone is not one).
Status Error(const std::string& what, const std::string& path, int err) {
  std::string message = ErrnoStatus("remove tree: " + what + " " + path, err).message();
  if (HeldOpenName(path)) message += std::string(" (") + kHeldOpen + ")";
  return IOError(std::move(message));
}

std::string Join(const std::string& dir, const std::string& name) {
  return !dir.empty() && dir.back() == '/' ? dir + name : dir + "/" + name;
}

// The names in directory `fd` (which it closes), without "." and "..".
Status List(int fd, const std::string& path, std::vector<std::string>* names) {
  DIR* d = ::fdopendir(fd);
  if (d == nullptr) {
    const int err = errno;
    ::close(fd);
    return Error("list", path, err);
  }
  names->clear();
  int err = 0;
  for (;;) {
    errno = 0;
    const dirent* e = ::readdir(d);
    if (e == nullptr) {
      err = errno;
      break;
    }
    const std::string name = e->d_name;
    if (name != "." && name != "..") names->push_back(name);
  }
  ::closedir(d);
  return err == 0 ? OkStatus() : Error("list", path, err);
}

Status RemoveDirAt(int parent, const std::string& name, const std::string& path, int depth);

// Directory `name` of `parent`, never through a link; -1 with errno set.
int OpenDirAt(int parent, const std::string& name) {
  return ::openat(parent, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
}

// Removes entry `name` of directory `dir`: a file or link with unlinkat, a
// directory recursively. A name already gone is fine.
Status RemoveEntry(int dir, const std::string& name, const std::string& path, int depth) {
  if (::unlinkat(dir, name.c_str(), 0) == 0) return OkStatus();
  const int err = errno;
  if (err == ENOENT) return OkStatus();
  // Linux answers EISDIR for a directory (POSIX allows EPERM): look.
  struct stat st;
  if ((err == EISDIR || err == EPERM) &&
      ::fstatat(dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode)) {
    return RemoveDirAt(dir, name, path, depth + 1);
  }
  return Error("remove", path, err);
}

Status RemoveDirAt(int parent, const std::string& name, const std::string& path, int depth) {
  if (depth > kMaxDepth) {
    return IOError("remove tree: " + path + " is more than " + std::to_string(kMaxDepth) +
                   " directories deep; not removed");
  }
  std::vector<std::string> names;
  for (int pass = 1;; ++pass) {
    const int fd = OpenDirAt(parent, name);
    if (fd < 0) {
      const int err = errno;
      if (err == ENOENT) return OkStatus();
      // Replaced by a file or a link since it was looked at: remove that.
      if (err == ENOTDIR || err == ELOOP) return RemoveEntry(parent, name, path, depth);
      return Error("open directory", path, err);
    }
    // The listing is read whole through a copy of the descriptor (closedir
    // closes it), then the entries are removed through `fd`.
    const int entries_fd = ::dup(fd);
    Status listed =
        entries_fd < 0 ? Error("open directory", path, errno) : List(entries_fd, path, &names);
    Status first = listed;
    for (size_t i = 0; listed.ok() && i < names.size(); ++i) {
      Status s = RemoveEntry(fd, names[i], Join(path, names[i]), depth);
      if (first.ok()) first = s;  // the others are still removed
    }
    ::close(fd);
    if (!first.ok()) return first;
    if (::unlinkat(parent, name.c_str(), AT_REMOVEDIR) == 0) return OkStatus();
    const int err = errno;
    if (err == ENOENT) return OkStatus();
    if (err != ENOTEMPTY && err != EEXIST) return Error("remove directory", path, err);
    if (pass < kRemoveTreePasses) continue;  // something appeared meanwhile: again
    // Name what is there now.
    std::string left;
    const int again = OpenDirAt(parent, name);
    if (again >= 0 && List(again, path, &names).ok()) {
      for (size_t i = 0; i < names.size() && i < 8; ++i) left += (i ? ", " : "") + names[i];
      if (names.size() > 8) left += ", ... (" + std::to_string(names.size()) + " in all)";
    }
    return IOError("remove tree: directory " + path + " is still not empty after " +
                   std::to_string(kRemoveTreePasses) + " passes (left: " +
                   (left.empty() ? std::string("?") : left) + "); " + kHeldOpen);
  }
}

}  // namespace

Status RemoveTree(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) {
    const int err = errno;
    return err == ENOENT ? OkStatus() : Error("stat", path, err);
  }
  if (!S_ISDIR(st.st_mode)) {
    if (::unlink(path.c_str()) == 0 || errno == ENOENT) return OkStatus();
    return Error("remove", path, errno);
  }
  return RemoveDirAt(AT_FDCWD, path, path, 0);
}

}  // namespace shardpoint::internal_io
