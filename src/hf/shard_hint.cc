// HfShard: Megatron-style local tensors from a mapping rule's split hint.
#include "shardpoint/hf_keys.h"
#include "shardpoint/layout.h"
#include "shardpoint/layout_fused.h"
#include "shardpoint/layout_megatron.h"
#include "src/hf/mapping.h"

namespace shardpoint {

Result<LocalTensor> HfShard(const HfKeyInfo& info, DType dtype, void* data, const HfParallel& p) {
  const std::string& h = info.split;
  const Shape& s = info.shape;
  auto need_rank = [&](size_t r) -> Status {
    if (s.size() < r) {
      return InvalidArgumentError("key '" + info.key + "' " + ShapeToString(s) + ": split '" + h +
                                  "' needs rank >= " + std::to_string(r));
    }
    return OkStatus();
  };
  const std::optional<internal_hf::HfSplit> split = internal_hf::ParseHfSplit(h);
  if (!split) {
    return InvalidArgumentError("key '" + info.key + "': unknown split hint '" + h + "'");
  }
  ExpertParallel ep{static_cast<int>(s.empty() ? 0 : s[0]), p.ep_rank, p.ep_size};
  switch (*split) {
    case internal_hf::HfSplit::kReplicated:
      return WholeTensor(info.key, dtype, data, s);
    case internal_hf::HfSplit::kColumn:
    case internal_hf::HfSplit::kVocab:
    case internal_hf::HfSplit::kGqa:
      SP_RETURN_IF_ERROR(need_rank(1));
      return ColumnParallel(info.key, dtype, data, s, p.tp_rank, p.tp_size);
    case internal_hf::HfSplit::kRow:
      if (s.size() < 2) return WholeTensor(info.key, dtype, data, s);  // a row-parallel bias
      return RowParallel(info.key, dtype, data, s, p.tp_rank, p.tp_size);
    case internal_hf::HfSplit::kSwiglu:
      SP_RETURN_IF_ERROR(need_rank(1));
      return SwiGluFc1(info.key, info.key, dtype, data, s[0] / 2, Shape(s.begin() + 1, s.end()),
                       p.tp_rank, p.tp_size);
    case internal_hf::HfSplit::kExpertsSwiglu:
      SP_RETURN_IF_ERROR(need_rank(3));
      return FusedGateUpExperts(info.key, dtype, data, s[1] / 2, s[2], ep, p.tp_rank, p.tp_size);
    case internal_hf::HfSplit::kExpertsRow:
    case internal_hf::HfSplit::kExpertsColumn:
      SP_RETURN_IF_ERROR(need_rank(3));
      return StackedExperts(info.key, dtype, data, Shape(s.begin() + 1, s.end()),
                            *split == internal_hf::HfSplit::kExpertsRow ? 1 : 0, ep, p.tp_rank,
                            p.tp_size);
  }
  return InvalidArgumentError("key '" + info.key + "': unknown split hint '" + h + "'");
}

}  // namespace shardpoint
