#include "src/io/path.h"

#include <string>

namespace shardpoint::internal_io {

std::string JoinPath(const std::string& dir, const std::string& name) {
  if (dir.empty()) return name;
  return dir.back() == '/' ? dir + name : dir + "/" + name;
}

}  // namespace shardpoint::internal_io
