// A strided view: a file of a source's index whose bytes are the row-major
// elements of a tensor that another file stores with strides.
//
// PyTorch's torch.save (so DCP, which saves every tensor item with it) keeps a
// tensor's storage and strides as they were: a transposed or permuted tensor,
// or a strided view of a larger storage, is stored in that element order. The
// index (src/source/source.h) describes such a chunk as an ordinary row-major
// chunk of a *view file*: the chunk's bytes [0, numel x element size) of that
// file. Every reader (the load pipeline, diff, convert, export) reads chunks
// through DataFiles (src/checkpoint/reader.h), which opens a view file as
// OpenStridedView: a read of row-major bytes [a, b) reads the byte range of the
// storage those elements span (and an eighth more ahead), in one request, and
// gathers them. The last span read is kept, so a row-major pass over a
// transposed tensor reads its storage once, and the runs of a part that lies
// in a band of the storage read about that band (the reader bridges no gap of
// a view file: ReadOptions::unbridged_files). Memory: at most the storage
// bytes the tensor spans, per view file open.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "shardpoint/box.h"
#include "shardpoint/status.h"
#include "shardpoint/storage.h"
#include "src/base/bytes.h"

namespace shardpoint::internal_dcp {

struct StridedView {
  uint32_t file = 0;              // the index file that is this view
  uint32_t base = 0;              // the index file holding the storage (not a view)
  uint64_t storage_offset = 0;    // absolute byte offset of storage element 0 in `base`
  uint64_t storage_elements = 0;  // the storage's size, in elements
  uint32_t element_size = 1;      // bytes
  uint64_t first = 0;             // storage element of the tensor's element [0, ..., 0]
  Shape size;                     // the tensor's
  Shape stride;                   // in elements, >= 0
};

// Row-major strides of `size`, up to dims of size 1 (whose stride is
// irrelevant): whether a tensor stored with `stride` is plain row-major.
bool IsRowMajor(const Shape& size, const Shape& stride);

// The storage element span [lo, hi] that the elements of `size`/`stride`
// starting at `first` touch, checked against `storage_elements`: DataLoss
// naming `what` if a stride is negative, the span overflows or lies outside
// the storage. REQUIRES: size has no zero dim (nothing to read otherwise).
Status CheckStridedView(const StridedView& v, const std::string& what);

// The row-major bytes of the view, read through `base` (which must outlive the
// returned file). `name` is the view file's path, for errors.
std::unique_ptr<ReadableFile> OpenStridedView(const StridedView& v, const ReadableFile* base,
                                              std::string name);

// For the broadcast of an index: the views as bytes, and back (validated:
// file indices below `num_files`, a base that is not itself a view, the
// element bounds).
void EncodeStridedViews(const std::vector<StridedView>& views, internal_base::ByteWriter* w);
Result<std::vector<StridedView>> DecodeStridedViews(internal_base::ByteReader* r,
                                                    uint64_t num_files, const std::string& what);

}  // namespace shardpoint::internal_dcp
