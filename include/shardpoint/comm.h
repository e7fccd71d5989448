// Comm: the collectives shardpoint needs, over any transport.
//
// Every method is collective: all ranks of the group call it in the same
// order. Payloads are bytes. Implementations: a single rank, ranks as threads
// of one process (MakeThreadComms), MPI, torch.distributed (Python). One Comm
// object belongs to one rank and is used by one thread at a time.
//
// Deadlines. Each collective of the thread, MPI and Python (torch.distributed,
// mpi4py) Comms waits at most its deadline, counted from the moment this rank
// enters it, for the other ranks. Past it, or earlier where the transport
// learns that a peer is gone (gloo: its connection closed), the collective
// fails with DeadlineExceeded naming the collective, its number and the ranks
// that did not arrive as far as the transport can tell (threads: exactly; MPI
// and gloo do not say, so those Comms name the ranks on this host whose
// process exited or is stopped), instead of waiting forever for a rank that
// died or hangs.
// The Comm is then broken: every later collective fails at once with the same
// error, since the ranks no longer agree on which collective is which. The
// deadline must exceed the longest a rank can be kept waiting by a peer's
// local work between two collectives of a save or a load (writing or reading
// its share of the checkpoint). Default: kDefaultCommDeadline.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "shardpoint/status.h"

namespace shardpoint {

// 30 minutes, torch.distributed's default process-group timeout: longer than
// any rank's share of a save or a load takes on storage worth using. A
// deadline of zero or less means none (wait forever).
inline constexpr std::chrono::milliseconds kDefaultCommDeadline = std::chrono::minutes(30);

class Comm {
 public:
  virtual ~Comm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Every rank receives every rank's bytes, indexed by rank.
  virtual Status AllGather(std::string_view mine, std::vector<std::string>* all) = 0;
  // Only `root` receives (all is resized to size() there, untouched elsewhere).
  virtual Status Gather(std::string_view mine, int root, std::vector<std::string>* all) = 0;
  // `root`'s *data is copied to every rank's *data.
  virtual Status Broadcast(std::string* data, int root) = 0;
  virtual Status Barrier() = 0;
  // Personalized exchange: send[r] goes to rank r (send.size() == size());
  // recv[r] is what rank r sent to this rank. The default is built on
  // AllGather (every rank sees every payload); thread and MPI comms send each
  // payload only to its destination.
  virtual Status AllToAll(const std::vector<std::string>& send, std::vector<std::string>* recv);
};

// Collective: every rank passes its local status; every rank returns OK if all
// were OK, else the error of the lowest failing rank, prefixed "rank R: ".
// A failure of the exchange itself is returned as is. This is how a failure on
// one rank aborts a collective operation on all ranks without a hang.
Status AgreeOnStatus(Comm& comm, const Status& local);

// A group of one.
std::unique_ptr<Comm> MakeSingleComm();
// `n` connected Comms for ranks as threads of this process; comms[i] is rank i.
// A collective waits at most `deadline` for the other ranks (see Deadlines).
std::vector<std::unique_ptr<Comm>> MakeThreadComms(
    int n, std::chrono::milliseconds deadline = kDefaultCommDeadline);
// Runs fn(comm) on `n` threads, one per rank, and returns each rank's status.
std::vector<Status> RunThreadRanks(int n, const std::function<Status(Comm&)>& fn,
                                   std::chrono::milliseconds deadline = kDefaultCommDeadline);

}  // namespace shardpoint
