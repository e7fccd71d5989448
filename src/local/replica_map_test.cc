#include "src/local/replica_map.h"

#include <gtest/gtest.h>

namespace shardpoint::internal_local {
namespace {

TEST(ReplicaMap, RoundTrips) {
  ReplicaMap m;
  m.files = {{"data/0.safetensors", {"a", "b"}}, {"data/1.safetensors", {"b", "c", "a"}}};
  const std::string text = EncodeReplicaMap(m);
  EXPECT_EQ(text,
            "shardpoint-local-replicas 1\ndata/0.safetensors\ta\tb\n"
            "data/1.safetensors\tb\tc\ta\n");
  auto back = DecodeReplicaMap(text, "x");
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->files, m.files);
}

TEST(ReplicaMap, MalformedIsDataLossNamingTheFile) {
  for (const char* bad :
       {"", "other\n", "shardpoint-local-replicas 1\nf\n", "shardpoint-local-replicas 1\nf\ta",
        "shardpoint-local-replicas 1\nf\t\tb\n"}) {
    auto r = DecodeReplicaMap(bad, "/n/replicas");
    ASSERT_EQ(r.status().code(), StatusCode::kDataLoss) << bad;
    EXPECT_NE(r.status().message().find("/n/replicas"), std::string::npos);
  }
}

}  // namespace
}  // namespace shardpoint::internal_local
