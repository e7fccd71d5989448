// Writing one tensor as DCP stores it: a torch.save archive (stored zip)
// holding archive/data.pkl (a `_rebuild_tensor_v2` of a typed storage, or for
// torch 2.x's newer dtypes a `_rebuild_tensor_v3` of an untyped storage, C-
// contiguous, offset 0), archive/byteorder ("little"), the storage bytes
// archive/data/0 and archive/version, exactly what LocateTensorItem reads and
// torch.load loads. The layout is planned first, so the caller streams the
// storage bytes to data_offset() and then writes the other bytes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "shardpoint/box.h"
#include "shardpoint/dtype.h"
#include "shardpoint/status.h"
#include "src/dcp/zip_writer.h"

namespace shardpoint::internal_dcp {

// The pickled torch dtype name ("float32", ...) of `dtype` for torch major
// version `torch_major` (1: 1.13, 2: 2.x); FailedPrecondition for a dtype
// that torch lacks (U16, U32, U64, F8 in 1.13).
Result<std::string_view> TorchDTypeName(DType dtype, int torch_major);

// data.pkl of a contiguous tensor of `shape` over a whole storage keyed "0",
// as that torch's torch.save writes it: `_rebuild_tensor_v2` of a typed
// storage ("torch.FloatStorage", numel in elements), or, for U16, U32, U64
// and F8 (torch 2.x only), `_rebuild_tensor_v3` of a `torch.storage.UntypedStorage`
// (numel in bytes) with the dtype as its seventh argument.
Result<std::string> EncodeTensorPickle(DType dtype, const Shape& shape, int torch_major);

class TensorItemLayout {
 public:
  static Result<TensorItemLayout> Plan(DType dtype, const Shape& shape, int torch_major);

  uint64_t size() const { return zip_.size(); }  // of the archive
  uint64_t data_offset() const { return zip_.data_offset(data_); }
  uint64_t data_bytes() const { return data_bytes_; }
  // Every byte of the archive but the storage data, as (offset, bytes)
  // writes, given the CRC-32 of the storage data.
  std::vector<std::pair<uint64_t, std::string>> OtherBytes(uint32_t data_crc32) const;

 private:
  ZipLayout zip_;
  size_t data_ = 0;
  uint64_t data_bytes_ = 0;
  std::vector<std::pair<size_t, std::string>> small_;  // entries written whole
};

}  // namespace shardpoint::internal_dcp
