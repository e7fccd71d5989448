#include "tests/testing/reference.h"

#include <cstring>
#include <random>

#include "src/geometry/flat_range.h"
#include "src/geometry/view_range.h"
#include "src/plan/regions.h"

using shardpoint::internal_geometry::ContiguousView;
using shardpoint::internal_geometry::GatherFlatRange;
using shardpoint::internal_geometry::StridedCopy;
using shardpoint::internal_geometry::UnravelIndex;
using shardpoint::internal_geometry::View;
using shardpoint::internal_plan::BuildRegions;
using shardpoint::internal_plan::Region;
using shardpoint::internal_plan::RegionDesc;

namespace shardpoint::testing {
namespace {

Result<const RefTensor*> Find(const RefModel& ref, const RegionDesc& d) {
  auto it = ref.find(d.key);
  if (it == ref.end()) return NotFoundError("no reference tensor '" + d.key + "'");
  if (it->second.dtype != d.dtype || it->second.shape != d.global_shape) {
    return InvalidArgumentError("reference tensor '" + d.key + "' differs in dtype or shape");
  }
  return &it->second;
}

View TruthView(const RefTensor& t, const Box& box) {
  return ContiguousView(const_cast<char*>(t.bytes.data()), DTypeSize(t.dtype), t.shape).Sub(box);
}

}  // namespace

RefTensor RandomRefTensor(DType dtype, const Shape& shape, uint64_t seed) {
  RefTensor t{dtype, shape, {}};
  t.bytes.resize(Box::Whole(shape).num_elements() * DTypeSize(dtype));
  std::mt19937_64 rng(seed);
  size_t i = 0;
  for (; i + 8 <= t.bytes.size(); i += 8) {
    uint64_t v = rng();
    std::memcpy(t.bytes.data() + i, &v, 8);
  }
  for (; i < t.bytes.size(); ++i) t.bytes[i] = static_cast<char>(rng());
  return t;
}

Status FillFromReference(const RefModel& ref, const std::vector<LocalTensor>& tensors) {
  SP_ASSIGN_OR_RETURN(std::vector<Region> regions, BuildRegions(tensors));
  for (const Region& r : regions) {
    if (r.desc.box.empty()) continue;
    SP_ASSIGN_OR_RETURN(const RefTensor* t, Find(ref, r.desc));
    StridedCopy(r.view, TruthView(*t, r.desc.box));
  }
  return OkStatus();
}

Status CheckAgainstReference(const RefModel& ref, const std::vector<LocalTensor>& tensors) {
  SP_ASSIGN_OR_RETURN(std::vector<Region> regions, BuildRegions(tensors));
  std::vector<char> got, want;
  for (const Region& r : regions) {
    if (r.desc.box.empty()) continue;
    SP_ASSIGN_OR_RETURN(const RefTensor* t, Find(ref, r.desc));
    const int64_t n = r.desc.box.num_elements();
    const size_t es = DTypeSize(t->dtype);
    got.resize(n * es);
    want.resize(n * es);
    GatherFlatRange(got.data(), r.view, 0, n);
    GatherFlatRange(want.data(), TruthView(*t, r.desc.box), 0, n);
    if (std::memcmp(got.data(), want.data(), n * es) == 0) continue;
    int64_t i = 0;
    while (std::memcmp(got.data() + i * es, want.data() + i * es, es) == 0) ++i;
    Shape at = UnravelIndex(r.desc.box.shape, i);
    for (size_t d = 0; d < at.size(); ++d) at[d] += r.desc.box.offset[d];
    return DataLossError("tensor '" + r.desc.key + "' box " + r.desc.box.ToString() +
                         " differs from the reference at element " + ShapeToString(at));
  }
  return OkStatus();
}

}  // namespace shardpoint::testing
