#include "src/dcp/strided_file.h"

#include <algorithm>
#include <cstring>
#include <mutex>

#include "src/base/limits.h"
#include "src/geometry/copy_run.h"
#include "src/geometry/flat_range.h"

using shardpoint::internal_base::ByteReader;
using shardpoint::internal_base::ByteWriter;
using shardpoint::internal_geometry::FlatRangeToBoxes;
using shardpoint::internal_geometry::RowMajorStrides;

namespace shardpoint::internal_dcp {
namespace {

int64_t NumElements(const Shape& size) {
  int64_t n = 1;
  for (int64_t d : size) n *= d;
  return n;
}

// Storage elements [lo, hi] that the elements of `box` touch.
struct ElementSpan {
  uint64_t lo = 0, hi = 0;
};
ElementSpan SpanOf(const StridedView& v, const Box& box) {
  ElementSpan s{v.first, v.first};
  for (size_t d = 0; d < box.rank(); ++d) {
    s.lo += static_cast<uint64_t>(box.offset[d] * v.stride[d]);
    s.hi += static_cast<uint64_t>((box.offset[d] + box.shape[d] - 1) * v.stride[d]);
  }
  return s;
}

class StridedFile : public ReadableFile {
 public:
  StridedFile(const StridedView& v, const ReadableFile* base, std::string name)
      : v_(v), base_(base), name_(std::move(name)) {
    whole_ = SpanOf(v_, Box::Whole(v_.size));
  }

  Status ReadAt(uint64_t offset, size_t n, void* dst) const override {
    const uint64_t es = v_.element_size;
    const uint64_t total = static_cast<uint64_t>(NumElements(v_.size)) * es;
    if (offset > total || n > total - offset) {
      return DataLossError("'" + name_ + "': bytes [" + std::to_string(offset) + ", " +
                           std::to_string(offset + n) + ") lie past the tensor's " +
                           std::to_string(total));
    }
    if (n == 0) return OkStatus();
    const int64_t e0 = static_cast<int64_t>(offset / es);
    const int64_t e1 = static_cast<int64_t>((offset + n + es - 1) / es);
    ElementSpan need{~uint64_t{0}, 0};
    for (const Box& b : FlatRangeToBoxes(v_.size, e0, e1)) {
      const ElementSpan s = SpanOf(v_, b);
      need.lo = std::min(need.lo, s.lo);
      need.hi = std::max(need.hi, s.hi);
    }
    SP_ASSIGN_OR_RETURN(Cached span, Span(need));
    const bool aligned = offset % es == 0 && n % es == 0;
    std::string tmp;
    char* out = static_cast<char*>(dst);
    if (!aligned) {
      tmp.resize(static_cast<size_t>(e1 - e0) * es);
      out = tmp.data();
    }
    Gather(e0, e1, span, out);
    if (!aligned) std::memcpy(dst, tmp.data() + (offset - e0 * es), n);
    return OkStatus();
  }
  Result<uint64_t> Size() const override {
    return static_cast<uint64_t>(NumElements(v_.size)) * v_.element_size;
  }
  const std::string& path() const override { return name_; }

 private:
  struct Cached {
    ElementSpan span;
    std::shared_ptr<const std::string> bytes;
  };

  // The storage bytes of elements [need.lo, need.hi]: the cached span if it
  // holds them, else read with an eighth more ahead (the runs of a part of a
  // permuted tensor have spans sliding forward by a few elements), up to the
  // whole span. A span that overlaps or touches the cached one reads only
  // what the cache lacks and keeps the union: the requests of one part come
  // from the I/O threads in any order, and the slices of a `.t()` matrix's
  // rows each span almost the whole storage, so reading each afresh read the
  // storage once per slice.
  Result<Cached> Span(ElementSpan need) const {
    std::lock_guard<std::mutex> lock(mu_);
    if (cache_.bytes && cache_.span.lo <= need.lo && need.hi <= cache_.span.hi) return cache_;
    need.hi = std::min(whole_.hi, need.hi + (need.hi - need.lo) / 8 + 1);
    const bool extend =
        cache_.bytes && need.lo <= cache_.span.hi + 1 && cache_.span.lo <= need.hi + 1;
    const ElementSpan span =
        extend ? ElementSpan{std::min(need.lo, cache_.span.lo), std::max(need.hi, cache_.span.hi)}
               : need;
    const uint64_t es = v_.element_size;
    auto bytes = std::make_shared<std::string>((span.hi - span.lo + 1) * es, '\0');
    const ElementSpan have = extend ? cache_.span : ElementSpan{span.hi + 1, span.hi};
    if (extend) {
      std::memcpy(bytes->data() + (have.lo - span.lo) * es, cache_.bytes->data(),
                  cache_.bytes->size());
    }
    SP_RETURN_IF_ERROR(ReadElements(span, span.lo, have.lo, bytes.get()));
    SP_RETURN_IF_ERROR(ReadElements(span, have.hi + 1, span.hi + 1, bytes.get()));
    cache_ = Cached{span, std::move(bytes)};
    return cache_;
  }

  // Storage elements [lo, hi) into their place in `bytes`, which holds `span`.
  Status ReadElements(ElementSpan span, uint64_t lo, uint64_t hi, std::string* bytes) const {
    if (lo >= hi) return OkStatus();
    const uint64_t es = v_.element_size;
    return base_
        ->ReadAt(v_.storage_offset + lo * es, (hi - lo) * es, bytes->data() + (lo - span.lo) * es)
        .WithContext("'" + name_ + "'");
  }

  // Row-major elements [e0, e1) of the tensor, packed into out: box by box
  // (FlatRangeToBoxes), each walked in storage order (dims by decreasing
  // stride), so the storage is read forward and the writes stay inside the
  // request's output (a transpose then streams through its source).
  void Gather(int64_t e0, int64_t e1, const Cached& span, char* out) const {
    const size_t rank = v_.size.size(), es = v_.element_size;
    const char* src = span.bytes->data() - span.span.lo * es;
    if (rank == 0) {
      std::memcpy(out, src + v_.first * es, es);
      return;
    }
    const Shape rm = RowMajorStrides(v_.size);
    std::vector<size_t> order(rank);  // outermost first; the last is walked innermost
    for (size_t d = 0; d < rank; ++d) order[d] = d;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return v_.stride[a] > v_.stride[b] || (v_.stride[a] == v_.stride[b] && rm[a] > rm[b]);
    });
    const size_t in = order[rank - 1];
    const int64_t sstep = v_.stride[in], dstep = rm[in];
    for (const Box& b : FlatRangeToBoxes(v_.size, e0, e1)) {
      Shape idx(rank, 0);  // relative to the box
      for (;;) {
        int64_t sp = static_cast<int64_t>(v_.first), dp = -e0;
        for (size_t d = 0; d < rank; ++d) {
          sp += (b.offset[d] + idx[d]) * v_.stride[d];
          dp += (b.offset[d] + idx[d]) * rm[d];
        }
        Copy(src + sp * static_cast<int64_t>(es), sstep, out + dp * static_cast<int64_t>(es), dstep,
             b.shape[in]);
        size_t k = rank - 1;  // carry through the outer dims, in storage order
        while (k-- > 0 && ++idx[order[k]] == b.shape[order[k]]) idx[order[k]] = 0;
        if (k == static_cast<size_t>(-1)) break;
      }
    }
  }

  // n elements, source and destination each `step` elements apart.
  void Copy(const char* s, int64_t sstep, char* d, int64_t dstep, int64_t n) const {
    const int64_t es = static_cast<int64_t>(v_.element_size);
    internal_geometry::CopyRun(d, dstep * es, s, sstep * es, n, v_.element_size,
                               sstep == 1 && dstep == 1);
  }

  const StridedView v_;
  const ReadableFile* const base_;
  const std::string name_;
  ElementSpan whole_;
  mutable std::mutex mu_;
  mutable Cached cache_;
};

}  // namespace

bool IsRowMajor(const Shape& size, const Shape& stride) {
  int64_t expect = 1;
  for (size_t d = size.size(); d-- > 0;) {
    if (size[d] != 1 && stride[d] != expect) return false;
    expect *= size[d];
  }
  return true;
}

Status CheckStridedView(const StridedView& v, const std::string& what) {
  if (v.stride.size() != v.size.size() || v.size.size() > internal_base::kMaxRank) {
    return DataLossError(what + ": size and stride differ in rank");
  }
  if (v.element_size == 0 || v.element_size > 16) {
    return DataLossError(what + ": element size " + std::to_string(v.element_size));
  }
  unsigned __int128 hi = v.first;
  for (size_t d = 0; d < v.size.size(); ++d) {
    if (v.size[d] <= 0) return DataLossError(what + ": a view of no elements");
    if (v.stride[d] < 0) {
      return DataLossError(what + ": stride " + ShapeToString(v.stride) + " is negative");
    }
    hi += static_cast<unsigned __int128>(v.size[d] - 1) * static_cast<uint64_t>(v.stride[d]);
  }
  if (hi >= v.storage_elements) {
    return DataLossError(what + ": the tensor of size " + ShapeToString(v.size) + ", strides " +
                         ShapeToString(v.stride) + " and storage offset " +
                         std::to_string(v.first) + " reaches past its storage of " +
                         std::to_string(v.storage_elements) + " elements");
  }
  const unsigned __int128 end =
      v.storage_offset + static_cast<unsigned __int128>(v.storage_elements) * v.element_size;
  if (end > ~uint64_t{0}) return DataLossError(what + ": storage bytes overflow");
  return OkStatus();
}

std::unique_ptr<ReadableFile> OpenStridedView(const StridedView& v, const ReadableFile* base,
                                              std::string name) {
  return std::make_unique<StridedFile>(v, base, std::move(name));
}

void EncodeStridedViews(const std::vector<StridedView>& views, ByteWriter* w) {
  w->U64(views.size());
  for (const StridedView& v : views) {
    w->U32(v.file);
    w->U32(v.base);
    w->U64(v.storage_offset);
    w->U64(v.storage_elements);
    w->U32(v.element_size);
    w->U64(v.first);
    w->Ints(v.size);
    w->Ints(v.stride);
  }
}

Result<std::vector<StridedView>> DecodeStridedViews(ByteReader* r, uint64_t num_files,
                                                    const std::string& what) {
  uint64_t n = 0;
  SP_RETURN_IF_ERROR(r->Count(&n, 38));
  std::vector<StridedView> views(n);
  std::vector<bool> is_view(num_files, false);
  for (StridedView& v : views) {
    SP_RETURN_IF_ERROR(r->U32(&v.file));
    SP_RETURN_IF_ERROR(r->U32(&v.base));
    SP_RETURN_IF_ERROR(r->U64(&v.storage_offset));
    SP_RETURN_IF_ERROR(r->U64(&v.storage_elements));
    SP_RETURN_IF_ERROR(r->U32(&v.element_size));
    SP_RETURN_IF_ERROR(r->U64(&v.first));
    SP_RETURN_IF_ERROR(r->Ints(&v.size));
    SP_RETURN_IF_ERROR(r->Ints(&v.stride));
    if (v.file >= num_files || is_view[v.file]) {
      return DataLossError(what + ": strided view of file " + std::to_string(v.file) +
                           " is out of range or listed twice");
    }
    is_view[v.file] = true;
    SP_RETURN_IF_ERROR(CheckStridedView(v, what));
  }
  for (const StridedView& v : views) {
    if (v.base >= num_files || is_view[v.base]) {
      return DataLossError(what + ": strided view of file " + std::to_string(v.file) +
                           " has base file " + std::to_string(v.base) +
                           ", out of range or itself a view");
    }
  }
  return views;
}

}  // namespace shardpoint::internal_dcp
