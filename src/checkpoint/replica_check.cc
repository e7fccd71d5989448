#include "src/checkpoint/replica_check.h"

#include <algorithm>

#include "src/format/checksum.h"
#include "src/geometry/view.h"

using shardpoint::internal_format::Checksum64;
using shardpoint::internal_format::ChecksumState;
using shardpoint::internal_geometry::ContiguousView;
using shardpoint::internal_geometry::StridedCopy;
using shardpoint::internal_geometry::View;
using shardpoint::internal_io::ParallelFor;
using shardpoint::internal_plan::RankFile;
using shardpoint::internal_plan::Region;
using shardpoint::internal_plan::WriteItem;

namespace shardpoint::internal_checkpoint {
namespace {

constexpr size_t kScratchBytes = 4 << 20;

// Appends the row-major bytes of `v` to `sum`, staging through `scratch`
// slices of dim 0 (recursing into dim 1.. when one slice is too large).
void Update(const View& v, ChecksumState* sum, std::vector<char>* scratch) {
  const int64_t n = v.num_elements();
  if (n == 0) return;
  if (v.IsContiguous()) {
    sum->Update(v.data, static_cast<size_t>(n) * v.elem_size);
    return;
  }
  const size_t row_bytes = static_cast<size_t>(n / v.shape[0]) * v.elem_size;
  if (row_bytes > kScratchBytes) {
    for (int64_t i = 0; i < v.shape[0]; ++i) {
      Box row = Box::Whole(v.shape);
      row.offset[0] = i, row.shape[0] = 1;
      View sub = v.Sub(row);
      sub.shape.erase(sub.shape.begin());
      sub.byte_strides.erase(sub.byte_strides.begin());
      Update(sub, sum, scratch);
    }
    return;
  }
  const int64_t rows = std::max<int64_t>(1, static_cast<int64_t>(kScratchBytes / row_bytes));
  scratch->resize(static_cast<size_t>(rows) * row_bytes);
  for (int64_t i = 0; i < v.shape[0]; i += rows) {
    Box part = Box::Whole(v.shape);
    part.offset[0] = i, part.shape[0] = std::min(rows, v.shape[0] - i);
    View src = v.Sub(part);
    StridedCopy(ContiguousView(scratch->data(), v.elem_size, src.shape), src);
    sum->Update(scratch->data(), static_cast<size_t>(part.shape[0]) * row_bytes);
  }
}

}  // namespace

uint64_t ChecksumView(const View& v) {
  ChecksumState sum;
  std::vector<char> scratch;
  Update(v, &sum, &scratch);
  return sum.Digest();
}

std::vector<uint64_t> ReplicaChecksums(const RankFile& rf, const std::vector<Region>& regions,
                                       const State& state, ThreadPool* pool) {
  std::vector<uint64_t> out(rf.replicas.size());
  ParallelFor(pool, static_cast<int64_t>(out.size()), [&](int64_t i) {
    const WriteItem& item = rf.replicas[i];
    if (item.is_object) {
      const std::string& b = state.objects[item.source].bytes;
      out[i] = Checksum64(b.data(), b.size());
    } else {
      out[i] = ChecksumView(regions[item.source].view);
    }
    return OkStatus();
  }).IgnoreError();
  return out;
}

}  // namespace shardpoint::internal_checkpoint
