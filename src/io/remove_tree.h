// Removing a directory tree, bounded.
#pragma once

#include <string>

#include "shardpoint/status.h"

namespace shardpoint::internal_io {

// How many times one directory is listed and emptied before its removal
// counts as failed.
inline constexpr int kRemoveTreePasses = 3;

// Removes `path` and everything under it. The tree is walked through directory
// descriptors (openat / unlinkat), so a symbolic link is removed, never what
// it points to. A path that does not exist is OK.
//
// Bounded: a directory still not empty after kRemoveTreePasses listings is an
// IOError naming it and what is left, never an endless loop. (A network or
// FUSE filesystem keeps a removed file that some process still holds open
// under a new name, .nfsXXXX or .fuse_hiddenXXXX; removing that name makes
// another, until the holder closes it.) An entry that cannot be removed
// (EBUSY, EACCES, ...) does not stop the others from being removed; the first
// such error is returned, naming the entry.
Status RemoveTree(const std::string& path);

}  // namespace shardpoint::internal_io
