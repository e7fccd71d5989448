// The grouped-query-attention interleave of Megatron's fused linear_qkv, in
// one place: the layout builder (src/layout/fused.cc, GqaQkv) and the HF
// mapping (src/hf/mapping.cc, "fuse": "gqa") both take their row runs from
// here.
//
// With `heads` query heads in `groups` key/value groups of `head_dim` rows
// each, the fused tensor's rows are, for each group g in order: the group's
// heads/groups query heads, then its key head, then its value head. q has
// heads * head_dim rows, k and v groups * head_dim each; the fused tensor
// (heads + 2 * groups) * head_dim.
#pragma once

#include <array>
#include <cstdint>

namespace shardpoint::internal_geometry {

struct GqaRun {
  int part = 0;         // 0 q, 1 k, 2 v
  int64_t src_row = 0;  // first row in the part
  int64_t dst_row = 0;  // first row in the fused tensor
  int64_t rows = 0;
};

// The three runs (q, k, v) of group g. REQUIRES: groups > 0, heads % groups
// == 0, 0 <= g < groups.
inline std::array<GqaRun, 3> GqaGroupRuns(int64_t heads, int64_t groups, int64_t head_dim,
                                          int64_t g) {
  const int64_t per_group = heads / groups, d = head_dim;
  const int64_t base = g * (per_group + 2) * d;
  return {{{0, g * per_group * d, base, per_group * d},
           {1, g * d, base + per_group * d, d},
           {2, g * d, base + (per_group + 1) * d, d}}};
}

// Rows of q, k and v.
inline std::array<int64_t, 3> GqaPartRows(int64_t heads, int64_t groups, int64_t head_dim) {
  return {heads * head_dim, groups * head_dim, groups * head_dim};
}

}  // namespace shardpoint::internal_geometry
