// ValidateLocalTensor: the checks every LocalTensor passes before planning.
//
// Stages: the tensor itself (dtype, shape, strides, flat range), then each
// segment on its own (key, global box, local placement), then the segments
// against each other (disjoint in the local tensor). Every product and sum of
// caller-supplied extents is overflow-checked.
#include <algorithm>
#include <string>
#include <vector>

#include "shardpoint/tensor.h"
#include "src/base/checked.h"
#include "src/base/limits.h"

namespace shardpoint {
namespace {

// The box a segment occupies in the local tensor: its global box's shape,
// prefixed with 1s up to the local rank. REQUIRES: local rank >= global rank.
Box LocalBox(const Segment& s) {
  Shape extent(s.local_offset.size() - s.global_box.shape.size(), 1);
  extent.insert(extent.end(), s.global_box.shape.begin(), s.global_box.shape.end());
  return Box(s.local_offset, std::move(extent));
}

std::string Describe(const Segment& s) {
  return "segment '" + s.key + "' (global box " + s.global_box.ToString() + " of " +
         ShapeToString(s.global_shape) + ")";
}

Status ValidateSegment(const Segment& s, const Shape& local_shape) {
  if (s.key.empty()) {
    return InvalidArgumentError("segment with global box " + s.global_box.ToString() +
                                " has an empty key");
  }
  if (s.key.size() > internal_base::kMaxStrBytes) {
    return InvalidArgumentError("segment key of " + std::to_string(s.key.size()) +
                                " bytes exceeds the format's " +
                                std::to_string(internal_base::kMaxStrBytes));
  }
  if (s.global_shape.size() > internal_base::kMaxRank) {
    return InvalidArgumentError("segment '" + s.key + "' global shape has rank " +
                                std::to_string(s.global_shape.size()) + ", more than " +
                                std::to_string(internal_base::kMaxRank));
  }
  if (Result<int64_t> n = CheckedNumElements(s.global_shape); !n.ok()) {
    return n.status().WithContext("segment '" + s.key + "' global shape");
  }
  SP_RETURN_IF_ERROR(ValidateBoxInShape(s.global_box, s.global_shape)
                         .WithContext("segment '" + s.key + "' global box"));
  if (s.local_offset.size() != local_shape.size() ||
      local_shape.size() < s.global_box.shape.size()) {
    return InvalidArgumentError(Describe(s) + " has local offset " + ShapeToString(s.local_offset) +
                                " of rank " + std::to_string(s.local_offset.size()) +
                                ", expected the local rank " + std::to_string(local_shape.size()) +
                                " (which must be at least the global rank)");
  }
  SP_RETURN_IF_ERROR(ValidateBoxInShape(LocalBox(s), local_shape)
                         .WithContext(Describe(s) + " does not fit the local shape " +
                                      ShapeToString(local_shape)));
  return OkStatus();
}

// Segments must not share local elements. Sweeps along the dim in which the
// boxes' starts are most spread out, so only pairs overlapping in that dim
// are compared: O(n log n + k), k such pairs (all of them real overlaps when
// segments are stacked along one dim, the common fused-weight case).
Status CheckDisjoint(const std::vector<Segment>& segments, size_t rank) {
  struct Item {
    Box box;
    size_t index;
  };
  std::vector<Item> items;
  items.reserve(segments.size());
  for (size_t i = 0; i < segments.size(); ++i) {
    Box b = LocalBox(segments[i]);
    if (!b.empty()) items.push_back({std::move(b), i});
  }
  if (items.size() < 2) return OkStatus();
  if (rank == 0) {  // two non-empty 0-d boxes are the same element
    return InvalidArgumentError(Describe(segments[items[0].index]) + " and " +
                                Describe(segments[items[1].index]) +
                                " both hold the one element of the 0-d local tensor");
  }
  size_t sweep = 0;
  size_t best = 0;
  for (size_t d = 0; d < rank; ++d) {
    std::vector<int64_t> starts;
    starts.reserve(items.size());
    for (const Item& it : items) starts.push_back(it.box.offset[d]);
    std::sort(starts.begin(), starts.end());
    const size_t distinct = std::unique(starts.begin(), starts.end()) - starts.begin();
    if (distinct > best) best = distinct, sweep = d;
  }
  std::sort(items.begin(), items.end(), [sweep](const Item& a, const Item& b) {
    return a.box.offset[sweep] < b.box.offset[sweep];
  });
  std::vector<const Item*> active;
  for (const Item& it : items) {
    const int64_t start = it.box.offset[sweep];
    std::erase_if(
        active, [&](const Item* a) { return a->box.offset[sweep] + a->box.shape[sweep] <= start; });
    for (const Item* a : active) {
      if (std::optional<Box> overlap = Intersect(a->box, it.box)) {
        return InvalidArgumentError(Describe(segments[a->index]) + " at local box " +
                                    a->box.ToString() + " and " + Describe(segments[it.index]) +
                                    " at local box " + it.box.ToString() +
                                    " overlap in the local tensor at " + overlap->ToString());
      }
    }
    active.push_back(&it);
  }
  return OkStatus();
}

}  // namespace

Status ValidateLocalTensor(const LocalTensor& t) {
  if (!IsValidDType(static_cast<uint8_t>(t.dtype))) {
    return InvalidArgumentError("local tensor has invalid dtype " +
                                std::to_string(static_cast<int>(t.dtype)));
  }
  Result<int64_t> numel = CheckedNumElements(t.shape);
  if (!numel.ok()) return numel.status().WithContext("local tensor shape");
  if (!t.strides.empty()) {
    if (t.flat) {
      return InvalidArgumentError("local tensor of shape " + ShapeToString(t.shape) +
                                  " is held as a flat range, so it must not have strides " +
                                  ShapeToString(t.strides));
    }
    if (t.strides.size() != t.shape.size()) {
      return InvalidArgumentError("local tensor strides " + ShapeToString(t.strides) +
                                  " do not match the rank of its shape " + ShapeToString(t.shape));
    }
    // The furthest element must be addressable: sum of (extent-1)*stride.
    int64_t last = 0;
    for (size_t d = 0; d < t.shape.size(); ++d) {
      std::optional<int64_t> end = last;
      if (t.shape[d] > 0) {
        std::optional<int64_t> step = internal_base::CheckedMul(t.shape[d] - 1, t.strides[d]);
        end = step ? internal_base::CheckedAdd(last, *step) : std::nullopt;
      }
      if (t.strides[d] < 0 || !end) {
        return InvalidArgumentError("local tensor strides " + ShapeToString(t.strides) +
                                    " are negative or overflow for shape " +
                                    ShapeToString(t.shape));
      }
      last = *end;
    }
  }
  if (t.flat && (t.flat->begin < 0 || t.flat->begin > t.flat->end || t.flat->end > *numel)) {
    return InvalidArgumentError("flat range [" + std::to_string(t.flat->begin) + ", " +
                                std::to_string(t.flat->end) + ") is not inside the " +
                                std::to_string(*numel) + " elements of local shape " +
                                ShapeToString(t.shape));
  }
  for (const Segment& s : t.segments) SP_RETURN_IF_ERROR(ValidateSegment(s, t.shape));
  return CheckDisjoint(t.segments, t.shape.size());
}

}  // namespace shardpoint
