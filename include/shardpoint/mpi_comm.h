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
std::unique_ptr<Comm> MakeMpiComm(MPI_Comm comm);

}  // namespace shardpoint

#endif  // SHARDPOINT_HAVE_MPI
