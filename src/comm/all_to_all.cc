// Comm::AllToAll's default: one AllGather of every rank's payloads (with
// their lengths), from which each rank keeps the parts addressed to it.
#include "shardpoint/comm.h"
#include "src/base/bytes.h"

using shardpoint::internal_base::ByteReader;
using shardpoint::internal_base::ByteWriter;

namespace shardpoint {

Status Comm::AllToAll(const std::vector<std::string>& send, std::vector<std::string>* recv) {
  using internal_base::ByteReader;
  using internal_base::ByteWriter;
  const int n = size();
  // Take part even with bad arguments, so the other ranks do not hang.
  const bool bad = static_cast<int>(send.size()) != n || recv == nullptr;
  ByteWriter w;
  if (!bad) {
    for (const std::string& part : send) w.Str(part);
  }
  // A part too long for its 32-bit length: send nothing, so every rank fails.
  Status encoded = w.status();
  if (!encoded.ok()) w.str().clear();
  std::vector<std::string> all;
  SP_RETURN_IF_ERROR(AllGather(w.str(), &all));
  if (bad) {
    return InvalidArgumentError("AllToAll: expected " + std::to_string(n) +
                                " payloads and an output, got " + std::to_string(send.size()));
  }
  if (!encoded.ok()) return encoded.WithContext("AllToAll");
  recv->assign(n, {});
  for (int r = 0; r < n; ++r) {
    if (all[r].empty()) {
      return InvalidArgumentError("AllToAll: rank " + std::to_string(r) + " sent no payloads");
    }
    ByteReader in(all[r], "AllToAll payloads of rank " + std::to_string(r));
    std::string part;
    for (int d = 0; d <= rank(); ++d) SP_RETURN_IF_ERROR(in.Str(&part));
    (*recv)[r] = std::move(part);
  }
  return OkStatus();
}

}  // namespace shardpoint
