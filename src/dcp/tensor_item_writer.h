// Writing one tensor as DCP stores it: a torch.save archive (stored zip)
// holding archive/data.pkl (a `_rebuild_tensor_v2` of a typed storage, C-
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

// The typed storage class ("FloatStorage", ...) torch 1.13 saves `dtype`
// with; FailedPrecondition for dtypes torch 1.13 has no storage for (U16,
// U32, U64, F8).
Result<std::string_view> TorchStorageClass(DType dtype);
// The pickled torch dtype name ("float32", ...), same dtypes.
Result<std::string_view> TorchDTypeName(DType dtype);

// data.pkl of a contiguous tensor of `shape` over a whole storage of class
// `storage_class` keyed "0".
std::string EncodeTensorPickle(std::string_view storage_class, const Shape& shape);

class TensorItemLayout {
 public:
  static Result<TensorItemLayout> Plan(DType dtype, const Shape& shape);

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
