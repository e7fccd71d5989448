// The door (src/source/): a shardpoint checkpoint, an HF model and a PyTorch
// DCP directory are each opened through the caller's Storage (an in-memory
// one here, as an object store would be: nothing touches the POSIX
// filesystem), their kind decided once and carried on the Source, and the
// public Convert picks its direction by that kind and reports it.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "shardpoint/checkpoint.h"
#include "shardpoint/comm.h"
#include "shardpoint/hf.h"
#include "shardpoint/verify.h"
#include "src/source/mapped_source.h"

namespace shardpoint {
namespace {

using internal_source::MappedSource;

// Three F32 tensors with seeded values; `mem` holds their bytes.
State MakeState(std::vector<std::vector<float>>* mem) {
  std::mt19937 rng(36);
  mem->assign(3, std::vector<float>(6 * 4));
  State s;
  for (size_t i = 0; i < mem->size(); ++i) {
    for (float& v : (*mem)[i]) v = static_cast<float>(rng() % 4096) / 16.0f;
    LocalTensor t;
    t.data = (*mem)[i].data();
    t.shape = {6, 4};
    t.segments = {Segment{"t" + std::to_string(i), {6, 4}, Box::Whole({6, 4}), {0, 0}}};
    s.tensors.push_back(t);
  }
  return s;
}

TEST(DoorTest, OpensEveryKindThroughTheCallersStorageAndConvertReportsIt) {
  std::unique_ptr<Storage> mem = NewMemStorage();
  std::vector<std::vector<float>> want;
  State state = MakeState(&want);
  std::unique_ptr<Comm> comm = MakeSingleComm();
  SaveOptions so;
  so.storage = mem.get();
  ASSERT_TRUE(Save(state, "/ck", *comm, so).ok());

  ExportHfOptions eo;
  eo.storage = mem.get();
  const HfMapping mapping = IdentityHfMapping();
  Result<ExportHfStats> to_hf = Convert("/ck", "/hf", mapping, eo);
  ASSERT_TRUE(to_hf.ok()) << to_hf.status().ToString();
  EXPECT_EQ(to_hf->source_kind, CheckpointKind::kShardpoint);
  Result<ExportHfStats> to_dcp = ConvertToDcp("/ck", "/dcp", mapping, eo);
  ASSERT_TRUE(to_dcp.ok()) << to_dcp.status().ToString();
  EXPECT_EQ(to_dcp->source_kind, CheckpointKind::kShardpoint);
  Result<ExportHfStats> from_hf = Convert("/hf", "/ck_hf", mapping, eo);
  ASSERT_TRUE(from_hf.ok()) << from_hf.status().ToString();
  EXPECT_EQ(from_hf->source_kind, CheckpointKind::kHfModel);
  Result<ExportHfStats> from_dcp = Convert("/dcp", "/ck_dcp", mapping, eo);
  ASSERT_TRUE(from_dcp.ok()) << from_dcp.status().ToString();
  EXPECT_EQ(from_dcp->source_kind, CheckpointKind::kPyTorchDcp);

  const std::pair<const char*, CheckpointKind> dirs[] = {{"/ck", CheckpointKind::kShardpoint},
                                                         {"/hf", CheckpointKind::kHfModel},
                                                         {"/dcp", CheckpointKind::kPyTorchDcp},
                                                         {"/ck_hf", CheckpointKind::kShardpoint},
                                                         {"/ck_dcp", CheckpointKind::kShardpoint}};
  for (const auto& [dir, kind] : dirs) {
    Result<MappedSource> src = internal_source::OpenSource(mem.get(), dir, mapping, {});
    ASSERT_TRUE(src.ok()) << dir << ": " << src.status().ToString();
    EXPECT_EQ(src->checkpoint_kind, kind) << dir;
    ASSERT_EQ(src->index.tensors.size(), 3u) << dir;
    for (size_t i = 0; i < 3; ++i) EXPECT_EQ(src->index.tensors[i].key, "t" + std::to_string(i));
  }
  DescribeOptions d;
  d.storage = mem.get();
  Result<CheckpointDescription> desc = DescribeCheckpoint("/dcp", d);
  ASSERT_TRUE(desc.ok()) << desc.status().ToString();
  EXPECT_EQ(desc->kind, CheckpointKind::kPyTorchDcp);

  // Both round trips hold the saved values bit for bit.
  for (const char* dir : {"/ck_hf", "/ck_dcp"}) {
    std::vector<std::vector<float>> got;
    State back = MakeState(&got);
    for (auto& g : got) std::fill(g.begin(), g.end(), -1.0f);
    LoadOptions lo;
    lo.storage = mem.get();
    Result<LoadResult> r = Load(back, dir, *comm, lo);
    ASSERT_TRUE(r.ok()) << dir << ": " << r.status().ToString();
    EXPECT_EQ(got, want) << dir;
  }
}

}  // namespace
}  // namespace shardpoint
