#include "tests/testing/random_layout.h"

#include <algorithm>

#include "src/geometry/flat_range.h"

namespace shardpoint::testing {
namespace {

int64_t Uniform(std::mt19937_64& rng, int64_t lo, int64_t hi) {  // inclusive
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}

// A random partition of `whole` into boxes by recursive cuts.
void Partition(const Box& b, int depth, std::mt19937_64& rng, std::vector<Box>* out) {
  if (b.rank() == 0 || depth == 0 || Uniform(rng, 0, 3) == 0) {
    out->push_back(b);
    return;
  }
  const size_t d = Uniform(rng, 0, b.rank() - 1);
  if (b.shape[d] < 2) {
    out->push_back(b);
    return;
  }
  const int64_t cut = Uniform(rng, 1, b.shape[d] - 1);
  Box lo = b, hi = b;
  lo.shape[d] = cut;
  hi.offset[d] += cut;
  hi.shape[d] -= cut;
  Partition(lo, depth - 1, rng, out);
  Partition(hi, depth - 1, rng, out);
}

struct Piece {
  std::string key;
  const testing::RefTensor* ref;
  Box box;
};

char* Alloc(RandomRank& r, int64_t bytes) {
  r.buffers.emplace_back(new char[std::max<int64_t>(bytes, 1)]());
  return r.buffers.back().get();
}

// One local tensor holding `parts` (same key, equal trailing dims) stacked on
// dim 0, maybe with padded strides, maybe split into flat shards over ranks.
void Place(const std::vector<Piece>& parts, std::vector<RandomRank>& ranks, int owner,
           std::mt19937_64& rng) {
  const testing::RefTensor& ref = *parts[0].ref;
  const size_t es = DTypeSize(ref.dtype);
  LocalTensor lt;
  lt.dtype = ref.dtype;
  lt.shape = parts[0].box.shape;
  if (!lt.shape.empty()) lt.shape[0] = 0;
  for (const Piece& p : parts) {
    Shape local_offset(p.box.rank(), 0);
    if (!local_offset.empty()) local_offset[0] = lt.shape[0];
    lt.segments.push_back(Segment{p.key, ref.shape, p.box, local_offset});
    if (!lt.shape.empty()) lt.shape[0] += p.box.shape[0];
  }
  const int64_t n = Box::Whole(lt.shape).num_elements();
  const int mode = static_cast<int>(Uniform(rng, 0, 3));
  if (mode == 0 && n > 1) {
    // Flat shards over 2-3 ranks (FSDP-like), one LocalTensor per range.
    const int k = static_cast<int>(Uniform(rng, 2, 3));
    std::vector<int64_t> cuts = {0, n};
    for (int i = 1; i < k; ++i) cuts.push_back(Uniform(rng, 0, n));
    std::sort(cuts.begin(), cuts.end());
    for (size_t i = 0; i + 1 < cuts.size(); ++i) {
      RandomRank& r = ranks[(owner + i) % ranks.size()];
      LocalTensor shard = lt;
      shard.flat = FlatRange{cuts[i], cuts[i + 1]};
      shard.data = Alloc(r, (cuts[i + 1] - cuts[i]) * es);
      r.state.tensors.push_back(std::move(shard));
    }
    return;
  }
  std::vector<int> holders = {owner};
  if (mode == 1 && ranks.size() > 1) holders.push_back((owner + 1) % ranks.size());  // replica
  for (int h : holders) {
    LocalTensor copy = lt;
    if (mode == 2 && !lt.shape.empty()) {
      // Padded rows: strides of a wider buffer.
      Shape padded = lt.shape;
      padded.back() += Uniform(rng, 1, 3);
      copy.strides = internal_geometry::RowMajorStrides(padded);
      copy.data = Alloc(ranks[h], Box::Whole(padded).num_elements() * es);
    } else {
      copy.data = Alloc(ranks[h], n * es);
    }
    ranks[h].state.tensors.push_back(std::move(copy));
  }
}

}  // namespace

testing::RefModel RandomModel(std::mt19937_64& rng) {
  testing::RefModel model;
  const int count = static_cast<int>(Uniform(rng, 1, 4));
  for (int t = 0; t < count; ++t) {
    const DType dtype = static_cast<DType>(Uniform(rng, 0, kNumDTypes - 1));
    Shape shape(Uniform(rng, 0, 4));
    for (int64_t& s : shape) s = Uniform(rng, 0, 9) == 0 ? 0 : Uniform(rng, 1, 7);
    model["t" + std::to_string(t) + ".weight"] = testing::RandomRefTensor(dtype, shape, rng());
  }
  return model;
}

std::vector<RandomRank> RandomLayout(const testing::RefModel& model, int nranks,
                                     std::mt19937_64& rng) {
  std::vector<RandomRank> ranks(nranks);
  for (const auto& [key, ref] : model) {
    const Box whole = Box::Whole(ref.shape);
    if (whole.empty()) {
      // Zero elements: every rank may declare it; one must.
      for (int r = 0; r < nranks; ++r) {
        if (r == 0 || Uniform(rng, 0, 1)) Place({{key, &ref, whole}}, ranks, r, rng);
      }
      continue;
    }
    std::vector<Box> boxes;
    Partition(whole, 4, rng, &boxes);
    std::shuffle(boxes.begin(), boxes.end(), rng);
    // Fuse runs of boxes with equal trailing dims into one local tensor.
    for (size_t i = 0; i < boxes.size();) {
      std::vector<Piece> parts = {{key, &ref, boxes[i]}};
      size_t j = i + 1;
      while (j < boxes.size() && !ref.shape.empty() && Uniform(rng, 0, 2) == 0 &&
             std::equal(boxes[j].shape.begin() + 1, boxes[j].shape.end(),
                        boxes[i].shape.begin() + 1, boxes[i].shape.end())) {
        parts.push_back({key, &ref, boxes[j++]});
      }
      Place(parts, ranks, static_cast<int>(Uniform(rng, 0, nranks - 1)), rng);
      i = j;
    }
  }
  return ranks;
}

}  // namespace shardpoint::testing
