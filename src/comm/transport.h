// A marker for the Comms of shardpoint whose transport already moves bytes
// between the ranks of a node through memory (ranks as threads; MPI's
// shared-memory transport): a cooperative load moves its blocks through
// them as they are. Over any other Comm (torch.distributed, mpi4py, a
// user's), it moves the bytes between same-node ranks through shared memory
// itself (src/comm/shm_exchange.h). A Comm is one when it also derives from
// this class (dynamic_cast).
#pragma once

#include <string>

#include "shardpoint/comm.h"

namespace shardpoint::internal_comm {

class MemoryTransport {
 public:
  virtual ~MemoryTransport() = default;
};

// Whether a cooperative load over `comm` moves same-node bytes through its
// own shared memory (ShmExchange): the environment variable
// SHARDPOINT_SHM_EXCHANGE (the same on every rank) = 0 never, 1 over every
// Comm; unset (or anything else): over every Comm that is no MemoryTransport.
bool WantsShmExchange(const Comm& comm);

}  // namespace shardpoint::internal_comm
