// AgreeOnStatus: AllGatherAgreed (agreed.h) without a payload: one AllGather
// of one byte per rank when all are OK, the code byte and message on error.
#include "shardpoint/comm.h"
#include "src/comm/agreed.h"

namespace shardpoint {

Status AgreeOnStatus(Comm& comm, const Status& local) {
  return internal_comm::AllGatherAgreed(comm, local, {}, nullptr);
}

}  // namespace shardpoint
