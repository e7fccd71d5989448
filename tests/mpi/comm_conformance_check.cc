// The Comm conformance suite (tests/comm/comm_conformance.h) on MakeMpiComm,
// under mpirun (np 2, 3, 4; registered by the tests/mpi/*_check.cc glob).
// Each process hosts one rank. A standalone gtest program with its own main
// (MPI_Init/MPI_Finalize); every rank runs every test and the exit code is
// non-zero on every rank if any failed. Not named *_test.cc on purpose: the
// unit-test glob must not pick it up.
#include "shardpoint/mpi_comm.h"  // also <mpi.h>, without its C++ bindings
#include "tests/comm/comm_conformance.h"
#include "tests/mpi/mpi_test_main.h"

namespace shardpoint::testing {
namespace {

CommTransport Mpi() {
  return {"Mpi", [](const RankBody& body) {
            std::unique_ptr<Comm> comm = MakeMpiComm(MPI_COMM_WORLD);
            if (comm == nullptr) return std::vector<Status>{InternalError("MakeMpiComm failed")};
            int rank = -1, size = -1;
            MPI_Comm_rank(MPI_COMM_WORLD, &rank);
            MPI_Comm_size(MPI_COMM_WORLD, &size);
            EXPECT_EQ(comm->rank(), rank);
            EXPECT_EQ(comm->size(), size);
            return std::vector<Status>{body(*comm)};
          }};
}

INSTANTIATE_TEST_SUITE_P(World, CommConformance, ::testing::Values(Mpi()), CommTransportName);

// MPI only: the Comm works on a duplicate, so a pending message on the world
// communicator is not picked up by its collectives.
TEST(MpiComm, IndependentOfWorldTraffic) {
  std::unique_ptr<Comm> comm = MakeMpiComm(MPI_COMM_WORLD);
  ASSERT_NE(comm, nullptr);
  if (comm->size() < 2) GTEST_SKIP() << "needs 2 ranks";
  MPI_Request request = MPI_REQUEST_NULL;
  int token = 42, received = 0;
  if (comm->rank() == 0) MPI_Isend(&token, 1, MPI_INT, 1, 0, MPI_COMM_WORLD, &request);
  std::string data = comm->rank() == 0 ? "bcast" : "";
  ASSERT_TRUE(comm->Broadcast(&data, 0).ok());
  EXPECT_EQ(data, "bcast");
  if (comm->rank() == 1) {
    MPI_Recv(&received, 1, MPI_INT, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    EXPECT_EQ(received, 42);
  }
  if (comm->rank() == 0) MPI_Wait(&request, MPI_STATUS_IGNORE);
}

}  // namespace
}  // namespace shardpoint::testing

int main(int argc, char** argv) {
  return shardpoint::testing::RunMpiTests(argc, argv, "comm_conformance_check");
}
