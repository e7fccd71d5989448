// Comm::AllToAll's default: one AllGather of every rank's payloads (with
// their lengths), from which each rank keeps the parts addressed to it.
#include <cstring>

#include "shardpoint/comm.h"
#include "src/base/bytes.h"

using shardpoint::internal_base::ByteWriter;

namespace shardpoint {

Status Comm::AllToAll(const std::vector<std::string>& send, std::vector<std::string>* recv) {
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
  // Each rank's strings keep their memory: a caller that passes the same
  // recv round after round allocates nothing once it is large enough.
  recv->resize(n);
  for (int r = 0; r < n; ++r) {
    if (all[r].empty()) {
      return InvalidArgumentError("AllToAll: rank " + std::to_string(r) + " sent no payloads");
    }
    // Payloads are u32 length + bytes; skip those for lower ranks uncopied.
    const std::string& in = all[r];
    size_t at = 0;
    for (int d = 0;; ++d) {
      uint32_t len = 0;
      if (in.size() - at >= 4) std::memcpy(&len, in.data() + at, 4);
      if (in.size() - at < 4 || in.size() - at - 4 < len) {
        return DataLossError("AllToAll payloads of rank " + std::to_string(r) +
                             ": truncated at byte " + std::to_string(at));
      }
      at += 4;
      if (d == rank()) {
        (*recv)[r].assign(in.data() + at, len);
        break;
      }
      at += len;
    }
  }
  return OkStatus();
}

}  // namespace shardpoint
