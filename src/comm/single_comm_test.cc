#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "shardpoint/comm.h"

namespace shardpoint {
namespace {

TEST(SingleComm, Collectives) {
  std::unique_ptr<Comm> comm = MakeSingleComm();
  EXPECT_EQ(comm->rank(), 0);
  EXPECT_EQ(comm->size(), 1);
  for (size_t size : {size_t{0}, size_t{1}, size_t{1} << 20}) {
    const std::string mine(size, 'q');
    std::vector<std::string> all = {"stale", "entries"};
    ASSERT_TRUE(comm->AllGather(mine, &all).ok());
    EXPECT_EQ(all, std::vector<std::string>{mine});
    all = {"stale", "entries"};
    ASSERT_TRUE(comm->Gather(mine, 0, &all).ok());
    EXPECT_EQ(all, std::vector<std::string>{mine});
    std::string data = mine;
    ASSERT_TRUE(comm->Broadcast(&data, 0).ok());
    EXPECT_EQ(data, mine);
  }
  EXPECT_TRUE(comm->Barrier().ok());
}

TEST(SingleComm, BadArguments) {
  std::unique_ptr<Comm> comm = MakeSingleComm();
  std::string data;
  std::vector<std::string> all;
  EXPECT_EQ(comm->Broadcast(&data, 1).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(comm->Gather("", -1, &all).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(comm->AllGather("", nullptr).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(comm->Broadcast(nullptr, 0).code(), StatusCode::kInvalidArgument);
}

TEST(SingleComm, ThreadRanksOfOne) {
  std::vector<Status> statuses = RunThreadRanks(1, [](Comm& comm) -> Status {
    std::vector<std::string> all;
    SP_RETURN_IF_ERROR(comm.AllGather("solo", &all));
    EXPECT_EQ(all, std::vector<std::string>{"solo"});
    return comm.Barrier();
  });
  ASSERT_EQ(statuses.size(), 1u);
  EXPECT_TRUE(statuses[0].ok());
}

}  // namespace
}  // namespace shardpoint
