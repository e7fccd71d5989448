// libFuzzer target for DecodeHfHeaders: the blob rank 0 broadcasts after
// reading an HF model directory (file names and sizes, each file's
// safetensors JSON header, model.safetensors.index.json, config.json).
// Every other rank decodes it, so it is outside input twice over: the files
// on disk and the bytes from another rank.
//
// The first byte picks the mode: odd = the whole blob is fuzz input;
// even = one valid file is framed in and the rest of the input becomes
// index.json (so index checks are reached without the fuzzer having to learn
// the framing). Whatever decodes must be self-consistent.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "src/source/hf_dir.h"

using shardpoint::internal_source::DecodeHfHeaders;
using shardpoint::internal_source::HfDirIndex;

namespace {

// The blob's framing (see ReadHfHeaders), little-endian: u32 file count;
// per file u32-length name, u64 file size, u64-length JSON header; then
// u64-length index.json and u64-length config.json.
void Put(std::string* out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>(v >> (8 * i)));
}

std::string FrameOneFile(std::string_view index_json) {
  const std::string name = "model-00001-of-00001.safetensors";
  const std::string header = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  std::string b;
  Put(&b, 1, 4);
  Put(&b, name.size(), 4);
  b += name;
  Put(&b, 8 + header.size() + 8, 8);
  Put(&b, header.size(), 8);
  b += header;
  Put(&b, index_json.size(), 8);
  b += index_json;
  Put(&b, 0, 8);  // no config.json
  return b;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::string_view in(reinterpret_cast<const char*>(data) + 1, size - 1);
  std::string blob = (data[0] & 1) ? std::string(in) : FrameOneFile(in);
  shardpoint::Result<HfDirIndex> idx = DecodeHfHeaders(blob, "fuzz");
  if (!idx.ok()) {
    if (idx.status().code() == shardpoint::StatusCode::kOk) std::abort();
    return 0;
  }
  for (const HfDirIndex::Tensor& t : idx->tensors) {
    if (t.file >= idx->files.size()) std::abort();
  }
  return 0;
}
