// libFuzzer target for the restricted pickle reader and the DCP decoders
// built on it (.metadata and a tensor's data.pkl). Built and replayed over
// fuzz/corpus/dcp_pickle/ by fuzz/CMakeLists.txt (libFuzzer under
// SHARDPOINT_FUZZ; see fuzz/README.md).
//
// Every input either decodes or fails with DataLoss or FailedPrecondition.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "src/dcp/metadata.h"
#include "src/dcp/pickle.h"
#include "src/dcp/tensor_item.h"

using shardpoint::internal_dcp::DecodeDcpMetadata;
using shardpoint::internal_dcp::DecodeTensorPickle;
using shardpoint::internal_dcp::ParsePickle;

namespace {

void Check(const shardpoint::Status& s) {
  using shardpoint::StatusCode;
  if (!s.ok() && s.code() != StatusCode::kDataLoss && s.code() != StatusCode::kFailedPrecondition) {
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  Check(ParsePickle(
            in, [](std::string_view, std::string_view) { return true; }, "fuzz")
            .status());
  Check(DecodeDcpMetadata(in, "fuzz").status());
  Check(DecodeTensorPickle(in, "fuzz").status());
  return 0;
}
