#include "src/convert/read_box.h"

#include <vector>

#include "src/plan/load_plan.h"
#include "src/plan/regions.h"

using shardpoint::internal_checkpoint::DataFiles;
using shardpoint::internal_checkpoint::ExecuteLoadPlan;
using shardpoint::internal_checkpoint::ReadOptions;
using shardpoint::internal_checkpoint::ReadStats;
using shardpoint::internal_plan::BuildRegions;
using shardpoint::internal_plan::LoadPlan;
using shardpoint::internal_plan::PlanLoad;
using shardpoint::internal_plan::Region;
using shardpoint::internal_source::Source;

namespace shardpoint::internal_convert {

Status ReadBoxRange(const Source& src, DataFiles* files, const std::string& key, const Box& box,
                    int64_t begin, int64_t end, DType dtype, char* dst) {
  if (end <= begin) return OkStatus();
  const int64_t t = src.index.FindTensor(key);
  if (t < 0) return NotFoundError("'" + src.dir + "' has no tensor '" + key + "'");
  LocalTensor lt;
  lt.dtype = dtype;
  lt.data = dst;
  lt.shape = box.shape;
  lt.segments.push_back({key, src.index.tensors[t].shape, box, Shape(box.rank(), 0)});
  lt.flat = FlatRange{begin, end};
  SP_ASSIGN_OR_RETURN(std::vector<Region> regions, BuildRegions({lt}));
  SP_ASSIGN_OR_RETURN(LoadPlan plan, PlanLoad(src.index, regions));
  ReadStats stats;
  return ExecuteLoadPlan(src.index, plan, files, /*pool=*/nullptr, ReadOptions{src.has_checksums},
                         &stats);
}

}  // namespace shardpoint::internal_convert
