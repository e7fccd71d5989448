// Streaming copy from a Source into output files, block by block, in
// parallel: how export and offline conversion keep memory bounded (about
// (pool threads + 1) * block_bytes, whatever the size of the largest tensor).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "shardpoint/hf_export.h"
#include "src/io/resources.h"
#include "src/source/source.h"

namespace shardpoint::internal_convert {

// F16, BF16, F32, F64 and the F8 types (what --dtype converts).
bool IsFloatDType(DType d);

// Elements [out_offset, out_offset + box.num_elements()) of an output tensor
// are the row-major elements of `box` of source tensor `key`.
struct OutPiece {
  std::string key;
  Box box;
  int64_t out_offset = 0;
};

struct OutTensor {
  std::string name;  // for errors
  DType dtype = DType::kF32;
  int64_t numel = 0;
  int file = 0;
  uint64_t offset = 0;           // absolute, in the file
  std::vector<OutPiece> pieces;  // tile [0, numel)
};

struct StreamOptions {
  ThreadPool* pool = nullptr;  // nullptr: on the calling thread alone
  size_t block_bytes = size_t{64} << 20;
  // Compute Checksum64 of every output tensor (each is then one block).
  bool checksums = false;
  HfProgress progress;
  // If set: gets the CRC-32 (zip's) of every output tensor's bytes, computed
  // block by block and combined (DCP's torch.save archives need them).
  std::vector<uint32_t>* crc32s = nullptr;
};

// Writes every tensor; `checksums` (if requested) gets one per tensor.
Status StreamTensors(const internal_source::Source& src, Storage* storage,
                     const std::vector<WritableFile*>& files, const std::vector<OutTensor>& tensors,
                     const StreamOptions& options, std::vector<uint64_t>* checksums);

// The pool of an export or conversion: the shared one, or io_threads - 1
// threads made for the call (the calling thread works too).
ThreadPool* StreamPool(internal_io::CallResources& res);

// Runs one export or conversion (`what`, e.g. "export-hf") from `from` to
// `to`: resolves options' Resources (its deprecated `threads` wins when set),
// runs `body` and logs its outcome in one line.
Result<ExportHfStats> RunConversion(
    const std::string& what, const std::string& from, const std::string& to,
    const ExportHfOptions& options,
    const std::function<Result<ExportHfStats>(internal_io::CallResources& res)>& body);

}  // namespace shardpoint::internal_convert
