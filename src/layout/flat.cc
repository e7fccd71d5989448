// Flat buffers: parameters back to back, split evenly over DP ranks; each
// rank's piece of a parameter is that parameter's layout as a flat range.
#include <algorithm>
#include <string>

#include "shardpoint/layout.h"
#include "shardpoint/layout_flat.h"
#include "src/base/checked.h"

namespace shardpoint {
namespace {

int64_t RoundUp(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

}  // namespace

Result<FlatBufferLayout> PlanFlatBuffer(const std::vector<LocalTensor>& params, int64_t align,
                                        int dp_size) {
  if (align < 1 || dp_size < 1) {
    return InvalidArgumentError("flat buffer: alignment " + std::to_string(align) +
                                " and DP size " + std::to_string(dp_size) + " must be at least 1");
  }
  FlatBufferLayout l;
  l.dp_size = dp_size;
  int64_t pos = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    const LocalTensor& p = params[i];
    const std::string what = "flat buffer parameter " + std::to_string(i) +
                             (p.segments.empty() ? "" : " '" + p.segments[0].key + "'");
    if (p.flat || !p.strides.empty()) return InvalidArgumentError(what + " is flat or strided");
    SP_ASSIGN_OR_RETURN(int64_t n, CheckedNumElements(p.shape));
    pos = RoundUp(pos, align);
    l.offsets.push_back(pos);
    l.sizes.push_back(n);
    std::optional<int64_t> end = internal_base::CheckedAdd(pos, n);
    if (!end || *end > (int64_t{1} << 60)) {
      return InvalidArgumentError(what + ": buffer size overflows");
    }
    pos = *end;
  }
  l.total = RoundUp(pos, align * dp_size);
  l.shard_size = l.total / dp_size;
  return l;
}

Result<std::vector<LocalTensor>> FlatBufferShard(const std::vector<LocalTensor>& params,
                                                 const FlatBufferLayout& layout, int dp_rank,
                                                 void* shard_data, std::optional<DType> dtype) {
  if (layout.offsets.size() != params.size() || dp_rank < 0 || dp_rank >= layout.dp_size) {
    return InvalidArgumentError("flat buffer: DP rank " + std::to_string(dp_rank) + " of " +
                                std::to_string(layout.dp_size) + " or " +
                                std::to_string(params.size()) +
                                " parameters do not match the planned layout");
  }
  const int64_t lo = dp_rank * layout.shard_size, hi = lo + layout.shard_size;
  std::vector<LocalTensor> out;
  for (size_t i = 0; i < params.size(); ++i) {
    if (!dtype && params[i].dtype != params[0].dtype) {
      return InvalidArgumentError("flat buffer parameter " + std::to_string(i) +
                                  " differs in dtype from parameter 0");
    }
    LocalTensor param = params[i];
    if (dtype) param.dtype = *dtype;
    const int64_t p0 = layout.offsets[i], p1 = p0 + layout.sizes[i];
    const int64_t b = std::clamp(lo, p0, p1), e = std::clamp(hi, p0, p1);
    const int64_t begin = b - p0, end = std::max(b, e) - p0;
    char* at = static_cast<char*>(shard_data) +
               (std::clamp(b, lo, hi) - lo) * static_cast<int64_t>(DTypeSize(param.dtype));
    Result<LocalTensor> piece = FlatShard(std::move(param), FlatRange{begin, end}, at);
    if (!piece.ok()) {
      return piece.status().WithContext("flat buffer parameter " + std::to_string(i) +
                                        " on DP rank " + std::to_string(dp_rank));
    }
    out.push_back(std::move(*piece));
  }
  return out;
}

}  // namespace shardpoint
