// ShmExchange: an AllToAllAgreed (src/comm/agreed.h) whose payloads between
// ranks on the same node move through shared memory, not through the Comm.
//
// A comm written in Python (torch.distributed's gloo over TCP loopback,
// mpi4py) moves a few hundred MB/s per rank: well below a memcpy. So a
// cooperative load (src/checkpoint/cooperative.h) exchanges its blocks like
// this: each rank maps one segment of its own under `dir` (/dev/shm), which
// every other rank of its node maps read-only; an exchange copies each
// payload for a same-node rank into this rank's segment and sends that rank
// only its place (offset, length) through the Comm's AllToAll, with the
// status byte as before; the receiver copies the bytes out of the sender's
// mapping. Payloads to ranks on other nodes still travel through the Comm
// (hybrid). Each segment has two halves used by turns: a rank reads a peer's
// half of exchange k before it enters exchange k + 1, and the peer writes that
// half again only in exchange k + 2, after exchange k + 1 has completed, so
// no extra collective is needed before a half is reused. A payload that does
// not fit the half's room left travels through the Comm.
//
// Set-up (Open, collective, three small all-gathers): node ids (default the
// hostname), process ids and rank 0's random job token; every rank with a
// same-node peer creates its segment (O_EXCL, its bytes reserved with
// posix_fallocate, so a full /dev/shm fails here instead of a SIGBUS later);
// every rank opens and maps its peers' segments; then every creator unlinks
// its segment at once, so nothing is left behind once the set-up is over (a
// rank killed inside the set-up can leave its segment). Where any rank could
// not create or open a segment (no /dev/shm, different mount namespaces, no
// room) every rank uses the Comm alone: the decision is collective. Ranks of
// one process (threads) never use it unless `same_process` (tests): they
// share memory already.
//
// Failures stay every rank's: the status byte travels through the Comm in
// every payload as in AllToAllAgreed; a bad place from a peer (outside its
// segment) is this rank's error in *unpack, for the caller to agree on like
// any later local failure.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "shardpoint/comm.h"

namespace shardpoint::internal_comm {

struct ShmOptions {
  std::string node_id;                     // this rank's node; empty: the hostname
  std::string dir = "/dev/shm";            // where segments are created and opened
  bool same_process = false;               // also between ranks of one process
  uint64_t max_half = uint64_t{64} << 20;  // cap of each half of a segment
};

class ShmExchange {
 public:
  // Collective. `capacity[r]`: the most bytes rank r sends (all its payloads
  // together, status bytes aside) in one exchange, the same vector on every
  // rank; a half holds that (with room for status bytes and alignment), at
  // most max_half bytes. Returns the exchange, or a failure of the
  // Comm; a segment that cannot be created or opened only turns it off.
  static Result<std::unique_ptr<ShmExchange>> Open(Comm& comm,
                                                   const std::vector<uint64_t>& capacity,
                                                   const ShmOptions& options);
  ~ShmExchange();
  ShmExchange(const ShmExchange&) = delete;
  ShmExchange& operator=(const ShmExchange&) = delete;

  // AllToAllAgreed's contract (byte 0 of each (*send)[r] is the status's; the
  // strings of *send keep their memory, their content is spent). Returns the
  // agreed status; when OK, (*recv)[r] holds rank r's payload with the status
  // byte first, and *unpack is this rank's failure to take a peer's bytes
  // (not yet agreed). With `views`, the payloads that came through shared
  // memory are not copied: (*views)[r] is rank r's payload (status byte
  // first) in r's segment or in (*recv)[r], valid until this rank enters the
  // next exchange (the sender writes that half again only in the one after).
  Status AllToAllAgreed(Comm& comm, const Status& local, std::vector<std::string>* send,
                        std::vector<std::string>* recv, Status* unpack,
                        std::vector<std::string_view>* views = nullptr);

  // Ranks whose payloads move through shared memory (0: the Comm alone).
  int shm_peers() const;
  uint64_t bytes_through_shm() const { return shm_bytes_; }

 private:
  struct Mapping;
  ShmExchange() = default;
  Status Unpack(int r, std::string* got, std::string_view* view);

  int me_ = 0;
  std::vector<char> shm_;  // shm_[r]: rank r's payloads to this rank go through shared memory
  std::unique_ptr<Mapping> own_;
  std::vector<std::unique_ptr<Mapping>> peer_;  // read-only mappings, by rank
  uint64_t turn_ = 0;                           // exchanges done: which half is in use
  uint64_t shm_bytes_ = 0;
};

}  // namespace shardpoint::internal_comm
