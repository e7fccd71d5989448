// errno as a Status: the one function where an OS error number becomes one,
// so every OS failure reads the same way, "<context>: <strerror text>".
// ENOENT is NotFound, every other number IOError. The Python binding refines
// an IOError into its OSError subclass by that text (python/src/errors.cc).
#pragma once

#include <string>

#include "shardpoint/status.h"

namespace shardpoint::internal_io {

// REQUIRES: `err` is an errno value (not 0).
Status ErrnoStatus(const std::string& context, int err);

}  // namespace shardpoint::internal_io
