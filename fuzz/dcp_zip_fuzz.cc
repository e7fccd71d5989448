// libFuzzer target for the stored-zip directory reader, the torch.save
// tensor locator and Megatron's common.pt renderer. Built and replayed over fuzz/corpus/dcp_zip/ by
// fuzz/CMakeLists.txt (libFuzzer under SHARDPOINT_FUZZ; see fuzz/README.md).
//
// The input is one archive. Every entry found lies inside it; every failure
// is DataLoss or FailedPrecondition.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "src/dcp/tensor_item.h"
#include "src/dcp/torch_dist.h"
#include "src/dcp/zip.h"

using shardpoint::internal_dcp::CommonPtToJson;
using shardpoint::internal_dcp::LocateTensorItem;
using shardpoint::internal_dcp::ReadZipDirectory;
using shardpoint::internal_dcp::TensorItemBytes;
using shardpoint::internal_dcp::ZipEntry;
using shardpoint::internal_dcp::ZipReadAt;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace shardpoint;
  ZipReadAt read = [&](uint64_t off, size_t n, char* dst) -> Status {
    if (off > size || n > size - off) std::abort();  // the reader asked outside the archive
    std::memcpy(dst, data + off, n);
    return OkStatus();
  };
  auto check = [](const Status& s) {
    if (!s.ok() && s.code() != StatusCode::kDataLoss &&
        s.code() != StatusCode::kFailedPrecondition) {
      std::abort();
    }
  };
  Result<std::vector<ZipEntry>> r = ReadZipDirectory(size, read, "fuzz");
  check(r.status());
  if (r.ok()) {
    for (const ZipEntry& e : *r) {
      if (e.data_offset > size || e.size > size - e.data_offset) std::abort();
    }
  }
  Result<TensorItemBytes> t = LocateTensorItem(size, read, "fuzz");
  check(t.status());
  if (t.ok() && (t->offset > size || t->nbytes > size - t->offset)) std::abort();
  check(
      CommonPtToJson(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz").status());
  return 0;
}
