// MakeMpiComm: a Comm over an MPI communicator (Open MPI, MPICH).
//
// Only available when shardpoint is built with SHARDPOINT_HAVE_MPI defined
// (and <mpi.h> on the include path); otherwise this header declares nothing,
// so the library builds without MPI.
#pragma once

#ifdef SHARDPOINT_HAVE_MPI

// The MPI-2 C++ bindings are deprecated and do not compile cleanly with
// -Wextra; shardpoint uses the C API only.
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <chrono>
#include <memory>

#include "shardpoint/comm.h"

namespace shardpoint {

// Collective over `comm`: duplicates it (so shardpoint's messages never mix
// with the caller's) and makes MPI errors on the duplicate come back as
// Status instead of aborting the job. MPI must be initialized, and the Comm
// destroyed before MPI_Finalize. Returns nullptr if the duplication fails.
// AllGather and Gather fail on every rank, with InvalidArgument, when the
// total over all ranks exceeds INT_MAX bytes (MPI counts are 32-bit);
// Broadcast has no such limit.
//
// Each collective waits at most `deadline` (comm.h, "Deadlines"; <= 0: none)
// and then fails with DeadlineExceeded naming the collective. MPI does not
// tell which rank did not arrive: the error names the ranks on this host whose
// process exited or is stopped (pids and hosts are exchanged here, one more
// all-gather), and says it cannot tell otherwise. The abandoned collective's request and buffers
// stay allocated for the life of the process (MPI forbids cancelling or
// freeing it), and so does the duplicated communicator. Whether the other
// ranks live on to see the error is the launcher's choice: Open MPI 4's
// mpirun kills the whole job when one rank dies, unless run with
// --enable-recovery (docs/reliability.md).
std::unique_ptr<Comm> MakeMpiComm(MPI_Comm comm,
                                  std::chrono::milliseconds deadline = kDefaultCommDeadline);

}  // namespace shardpoint

#endif  // SHARDPOINT_HAVE_MPI
