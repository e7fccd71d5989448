#include "src/dcp/nd_flattened.h"

#include <algorithm>

#include "src/geometry/flat_range.h"

using shardpoint::internal_format::ChunkRecord;
using shardpoint::internal_format::TensorRecord;
using shardpoint::internal_geometry::FlatRangeToBoxes;
using shardpoint::internal_geometry::RowMajorIndex;

namespace shardpoint::internal_dcp {
namespace {

// The block shape: orig[k] / stored[k]; DataLoss unless stored is
// [orig / block..., numel(block)].
Result<Shape> BlockShape(const Shape& orig, const TensorRecord& t) {
  const Shape& r = t.shape;
  auto bad = [&]() {
    return DataLossError("N-D flattened tensor '" + t.key + "': stored shape " + ShapeToString(r) +
                         " is not [blocks..., block size] of its original " + ShapeToString(orig) +
                         " (mcore_data)");
  };
  if (orig.empty() || r.size() != orig.size() + 1) return bad();
  Shape block(orig.size());
  int64_t n = 1;
  for (size_t k = 0; k < orig.size(); ++k) {
    if (r[k] <= 0 || orig[k] % r[k] != 0) return bad();
    block[k] = orig[k] / r[k];
    n *= block[k];
  }
  if (n != r.back()) return bad();
  return block;
}

}  // namespace

Result<std::vector<int64_t>> UnflattenNdTensor(const Shape& orig, TensorRecord* t) {
  SP_ASSIGN_OR_RETURN(Shape block, BlockShape(orig, *t));
  const size_t n = orig.size();
  const uint64_t es = DTypeSize(t->dtype);
  std::vector<ChunkRecord> out;
  std::vector<Box> first(t->chunks.size());  // each old chunk's first new box
  for (size_t i = 0; i < t->chunks.size(); ++i) {
    const ChunkRecord& c = t->chunks[i];
    for (size_t k = 0; k < n; ++k) {
      if (c.box.shape[k] != 1) {
        return DataLossError("N-D flattened tensor '" + t->key + "': chunk " + c.box.ToString() +
                             " spans several blocks (not a flat range of one)");
      }
    }
    const int64_t begin = c.box.offset[n], end = begin + c.box.shape[n];
    for (const Box& p : FlatRangeToBoxes(block, begin, end)) {
      ChunkRecord piece;
      piece.box = p;
      for (size_t k = 0; k < n; ++k) piece.box.offset[k] += c.box.offset[k] * block[k];
      piece.file = c.file;
      piece.offset = c.offset + static_cast<uint64_t>(RowMajorIndex(block, p.offset) - begin) * es;
      piece.nbytes = static_cast<uint64_t>(p.num_elements()) * es;
      if (first[i].rank() == 0) first[i] = piece.box;
      out.push_back(std::move(piece));
    }
  }
  std::sort(out.begin(), out.end(),
            [](const ChunkRecord& a, const ChunkRecord& b) { return a.box < b.box; });
  std::vector<int64_t> index(t->chunks.size(), -1);
  for (size_t i = 0; i < first.size(); ++i) {
    if (first[i].rank() == 0) continue;
    auto it = std::lower_bound(out.begin(), out.end(), first[i],
                               [](const ChunkRecord& a, const Box& b) { return a.box < b; });
    index[i] = it - out.begin();
  }
  t->shape = orig;
  t->chunks = std::move(out);
  return index;
}

}  // namespace shardpoint::internal_dcp
