// A PyTorch distributed checkpoint (DCP) directory as a shardpoint source: its
// `.metadata` and the torch.save archives inside its `.distcp` files become a
// Manifest whose files are the .distcp files and whose chunks point at the
// raw tensor bytes inside them, so the ordinary load planner reads only the
// byte ranges a resharded load needs. DCP stores no checksums: the chunk and
// object records carry checksum 0 and readers must not verify them.
//
// A directory is DCP if it holds `.metadata`. Byte items become objects
// (their stored bytes, unsharded). Errors name the file, the key and the byte
// range (DataLoss: malformed; FailedPrecondition: not read, e.g. transforms).
#pragma once

#include <string>
#include <vector>

#include "shardpoint/storage.h"
#include "src/dcp/metadata.h"
#include "src/dcp/strided_file.h"
#include "src/format/manifest.h"

namespace shardpoint::internal_dcp {

// A zip entry whose CRC-32 `verify` can check.
struct DcpCheckedEntry {
  std::string what;  // "'w' chunk [0:2, 0:4]"
  std::string key;
  int64_t chunk = -1;  // index into the tensor's chunks in the Manifest (-1: an empty chunk)
  uint32_t file = 0;
  uint64_t offset = 0;  // absolute, in the .distcp file
  uint64_t nbytes = 0;
  uint32_t crc32 = 0;
};

struct DcpIndex {
  DcpMetadata metadata;
  internal_format::Manifest m;           // files are .distcp names relative to the dir
  std::vector<DcpCheckedEntry> entries;  // the storage entry of every tensor chunk
  // Tensor items stored with strides (a transposed or permuted tensor, a
  // strided view): their chunks are row-major bytes of a view file, listed
  // in m.files after the .distcp files (src/dcp/strided_file.h).
  std::vector<StridedView> views;
};

// Reads `.metadata` and the zip directory and data.pkl of every tensor item.
Result<DcpIndex> ReadDcpIndex(Storage* storage, const std::string& dir);

// The index as bytes for a broadcast (a manifest encoding and the views) and
// back.
struct DcpTransitIndex {
  internal_format::Manifest m;
  std::vector<StridedView> views;
};
std::string EncodeDcpIndex(const internal_format::Manifest& m,
                           const std::vector<StridedView>& views);
Result<DcpTransitIndex> DecodeDcpIndex(std::string_view bytes, const std::string& dir);

}  // namespace shardpoint::internal_dcp
