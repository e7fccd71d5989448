// The Comm conformance suite (tests/comm/comm_conformance.h) on the single
// comm and on the thread comm with 1, 2 and 4 ranks.
#include "tests/comm/comm_conformance.h"

namespace shardpoint::testing {
namespace {

CommTransport Single() {
  return {"Single", [](const RankBody& body) {
            std::unique_ptr<Comm> comm = MakeSingleComm();
            return std::vector<Status>{body(*comm)};
          }};
}

CommTransport Threads(int n) {
  return {"Threads" + std::to_string(n),
          [n](const RankBody& body) { return RunThreadRanks(n, body); }};
}

INSTANTIATE_TEST_SUITE_P(InProcess, CommConformance,
                         ::testing::Values(Single(), Threads(1), Threads(2), Threads(4)),
                         CommTransportName);

}  // namespace
}  // namespace shardpoint::testing
