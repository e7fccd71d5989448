#include "src/plan/regions.h"

#include "src/geometry/flat_range.h"

using shardpoint::internal_geometry::ContiguousView;
using shardpoint::internal_geometry::FlatRangeToBoxes;
using shardpoint::internal_geometry::RowMajorIndex;
using shardpoint::internal_geometry::RowMajorStrides;
using shardpoint::internal_geometry::View;

namespace shardpoint::internal_plan {
namespace {

// The segment's extent in the local tensor: its global box shape prefixed
// with 1s up to the local rank.
Box LocalExtent(const Segment& seg) {
  Shape shape(seg.local_offset.size() - seg.global_box.rank(), 1);
  shape.insert(shape.end(), seg.global_box.shape.begin(), seg.global_box.shape.end());
  return Box(seg.local_offset, shape);
}

// Drops the leading `n` dims (of extent 1) of a local view.
View DropLeading(View v, size_t n) {
  v.shape.erase(v.shape.begin(), v.shape.begin() + n);
  v.byte_strides.erase(v.byte_strides.begin(), v.byte_strides.begin() + n);
  return v;
}

Box GlobalPart(const Segment& seg, const Box& local_part) {
  size_t lead = seg.local_offset.size() - seg.global_box.rank();
  Box g = seg.global_box;
  for (size_t d = 0; d < g.rank(); ++d) {
    g.offset[d] += local_part.offset[d + lead] - seg.local_offset[d + lead];
    g.shape[d] = local_part.shape[d + lead];
  }
  return g;
}

}  // namespace

Result<std::vector<Region>> BuildRegions(const std::vector<LocalTensor>& tensors) {
  std::vector<Region> out;
  for (size_t t = 0; t < tensors.size(); ++t) {
    const LocalTensor& lt = tensors[t];
    Status s = ValidateLocalTensor(lt);
    if (!s.ok()) return s.WithContext("tensor #" + std::to_string(t));
    const size_t es = DTypeSize(lt.dtype);
    char* base = static_cast<char*>(lt.data);

    // The whole local tensor as a view, and the local boxes actually held.
    View local;
    std::vector<Box> held;
    if (lt.flat) {
      local = ContiguousView(base, es, lt.shape);  // addressed relative to flat.begin below
      held = FlatRangeToBoxes(lt.shape, lt.flat->begin, lt.flat->end);
    } else {
      local.data = base;
      local.elem_size = es;
      local.shape = lt.shape;
      Shape strides = lt.strides.empty() ? RowMajorStrides(lt.shape) : lt.strides;
      local.byte_strides.resize(strides.size());
      for (size_t d = 0; d < strides.size(); ++d) local.byte_strides[d] = strides[d] * es;
      held.push_back(Box::Whole(lt.shape));
    }

    for (const Segment& seg : lt.segments) {
      RegionDesc desc{seg.key, lt.dtype, seg.global_shape, Box()};
      bool any = false;
      Box extent = LocalExtent(seg);
      for (const Box& h : held) {
        std::optional<Box> part = Intersect(h, extent);
        if (!part) continue;
        View v;
        if (lt.flat) {
          // In flat memory the element at local index i lives at
          // (RowMajorIndex(i) - begin); a box within one flat range keeps the
          // row-major strides of the local tensor.
          int64_t first = RowMajorIndex(lt.shape, part->offset) - lt.flat->begin;
          v = local;
          v.data = base + first * static_cast<int64_t>(es);
          v.shape = part->shape;
        } else {
          v = local.Sub(*part);
        }
        desc.box = GlobalPart(seg, *part);
        out.push_back(
            Region{desc, DropLeading(v, seg.local_offset.size() - seg.global_box.rank()), t});
        any = true;
      }
      if (!any && Box::Whole(seg.global_shape).empty()) {
        desc.box = Box::Whole(seg.global_shape);
        out.push_back(
            Region{desc, View{nullptr, es, desc.box.shape, Shape(desc.box.rank(), 0)}, t});
      }
    }
  }
  return out;
}

}  // namespace shardpoint::internal_plan
