#include "src/io/errno_status.h"

#include <cerrno>
#include <system_error>
#include <utility>

namespace shardpoint::internal_io {

Status ErrnoStatus(const std::string& context, int err) {
  std::string message = context + ": " + std::generic_category().message(err);
  if (err == ENOENT) return NotFoundError(std::move(message));
  return IOError(std::move(message));
}

}  // namespace shardpoint::internal_io
