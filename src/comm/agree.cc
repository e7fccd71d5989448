// AgreeOnStatus: one AllGather of each rank's status. An OK status is sent as
// zero bytes, an error as its code byte followed by its message, so the common
// all-OK case moves almost nothing.
#include <string>

#include "shardpoint/comm.h"

namespace shardpoint {

Status AgreeOnStatus(Comm& comm, const Status& local) {
  std::string mine;
  if (!local.ok()) {
    mine.push_back(static_cast<char>(local.code()));
    mine += local.message();
  }
  std::vector<std::string> all;
  SP_RETURN_IF_ERROR(comm.AllGather(mine, &all));
  for (size_t r = 0; r < all.size(); ++r) {
    const std::string& s = all[r];
    if (s.empty()) continue;
    const auto code = static_cast<StatusCode>(static_cast<unsigned char>(s[0]));
    std::string message = "rank " + std::to_string(r) + ": " + s.substr(1);
    // A code byte from a peer is untrusted input: an unknown or OK code must
    // still come out as an error, never as success.
    if (code <= StatusCode::kOk || code > StatusCode::kInternal) {
      return InternalError(message + " (unknown status code " +
                           std::to_string(static_cast<unsigned char>(s[0])) + ")");
    }
    return Status(code, std::move(message));
  }
  return OkStatus();
}

}  // namespace shardpoint
