// A tensor saved by torch.save, as DCP stores each tensor item: a stored zip
// holding `<prefix>/data.pkl` (a small pickle naming the storage and the
// tensor's offset, size and stride), the storage bytes `<prefix>/data/<key>`
// and optionally `<prefix>/byteorder`. LocateTensorItem finds the tensor's
// raw bytes without reading them.
//
// Read: one `_rebuild_tensor_v2` of one typed storage ("torch.FloatStorage",
// ...), or one `_rebuild_tensor_v3` of a `torch.storage.UntypedStorage` and a dtype
// (how torch 2.x saves float8 and uint16/32/64), little-endian, any
// non-negative strides (a transposed or permuted tensor, a strided view: not
// row_major, read as a strided view of the storage, src/dcp/strided_file.h).
// Refused (FailedPrecondition): other rebuild functions (sparse, quantized,
// nested, parameters with hooks), big-endian storages. Malformed input
// (negative strides, elements outside the storage): DataLoss.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "shardpoint/box.h"
#include "shardpoint/dtype.h"
#include "shardpoint/status.h"
#include "src/dcp/zip.h"

namespace shardpoint::internal_dcp {

// What data.pkl says.
struct TorchSavedTensor {
  DType dtype = DType::kF32;  // of the storage
  std::string storage_key;    // the zip entry is <prefix>/data/<storage_key>
  uint64_t storage_numel = 0;
  uint64_t storage_offset = 0;  // elements
  Shape size;
  Shape stride;
  // The elements are the storage's [storage_offset, + numel) in row-major
  // order (strides C-contiguous up to dims of size 1, or no elements).
  bool row_major = true;
};

inline constexpr uint64_t kMaxDataPklBytes = uint64_t{1} << 20;

// The classes and functions a tensor's data.pkl may name.
bool TensorPickleClassAllowed(std::string_view module, std::string_view name);
Result<TorchSavedTensor> DecodeTensorPickle(std::string_view data_pkl, const std::string& what);

// Where a saved tensor's bytes lie inside its archive.
struct TensorItemBytes {
  TorchSavedTensor tensor;
  // From the start of the archive, the bytes holding the tensor's elements:
  // if tensor.row_major, its first element on, elements of `size` x dtype
  // size; else the whole storage entry (storage.data_offset, storage.size).
  uint64_t offset = 0;
  uint64_t nbytes = 0;
  ZipEntry storage;  // the whole storage entry (for its CRC-32)
};

// Reads the zip directory and data.pkl of the archive of `size` bytes.
Result<TensorItemBytes> LocateTensorItem(uint64_t size, const ZipReadAt& read,
                                         const std::string& what);

}  // namespace shardpoint::internal_dcp
