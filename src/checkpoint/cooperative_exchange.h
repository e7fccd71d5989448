// The send buffers of a cooperative load's rounds (src/checkpoint/
// cooperative.h) and the exchange over the thread comms without copies.
//
// A round packs each rank's bytes into its payload from byte 1 (byte 0: the
// status byte, src/comm/agreed.h AllToAllAgreed). The payloads are kept
// from round to round (two sets, used by turns). Over the thread comms a
// set is one raw buffer holding the payloads back to back, allocated once
// for the most a rank sends in a round and never zero-filled (a std::string
// grows by a memset right before every byte is packed, and fresh memory
// costs page faults), and the receivers place straight from the senders'
// memory inside the collective (ViewAllToAll): no copy into receive
// buffers. Over any other Comm they are strings, as its AllToAll takes them.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "shardpoint/comm.h"
#include "src/comm/thread_comm.h"
#include "src/io/raw_buffer.h"

namespace shardpoint::internal_checkpoint {

class SendBuffers {
 public:
  // One payload per rank of `n`; raw memory (for ExchangeViews) of at least
  // `raw_bytes` (all payloads of a round together), or strings (raw_bytes 0).
  void Init(int n, uint64_t raw_bytes);
  // Makes rank r's payload sizes[r] bytes long, for every r; their content
  // is unspecified (raw) or zero-filled where a string grew.
  void Layout(const std::vector<uint64_t>& sizes);
  char* payload(int r) { return raw_ ? all_.data() + at_[r] : strings_[r].data(); }
  // The strings, for a Comm's AllToAll. REQUIRES: not raw.
  std::vector<std::string>* strings() { return &strings_; }

  // One AllToAllAgreed over the thread comms' AllToAllViews. REQUIRES: raw.
  // Sends `local`'s failure instead of the payloads where it is an error.
  // `place(recv)` runs inside the collective with every rank's payload to
  // this rank (status byte first) once every sender was OK, and its status
  // comes back in *placed; returns the agreed status (or the exchange's
  // failure).
  Status ExchangeViews(internal_comm::ViewAllToAll& comm, const Status& local,
                       const std::function<Status(const std::vector<std::string_view>&)>& place,
                       Status* placed);

 private:
  bool raw_ = false;
  internal_io::RawBuffer all_;
  std::vector<uint64_t> at_;  // raw: payload r is bytes [at_[r], at_[r + 1]) of all_
  std::vector<std::string> strings_;
};

}  // namespace shardpoint::internal_checkpoint
