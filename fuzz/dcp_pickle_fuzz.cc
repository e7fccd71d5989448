// libFuzzer target for the restricted pickle reader and the DCP decoders
// built on it (.metadata and torch.save data.pkl). Not part of the CMake
// build; build by hand from the repo root:
//
//   clang++ -std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -Iinclude -I. \
//     fuzz/dcp_pickle_fuzz.cc src/dcp/pickle.cc src/dcp/metadata.cc src/dcp/tensor_item.cc \
//     src/dcp/zip.cc src/base/status.cc src/geometry/dtype.cc src/geometry/box.cc \
//     -o /tmp/dcp_pickle_fuzz && /tmp/dcp_pickle_fuzz -max_total_time=60
//     tests/dcp/fixtures/*/.metadata
//
// Every input either decodes or fails with DataLoss or FailedPrecondition.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "src/dcp/metadata.h"
#include "src/dcp/pickle.h"
#include "src/dcp/tensor_item.h"

namespace {

void Check(const shardpoint::Status& s) {
  using shardpoint::StatusCode;
  if (!s.ok() && s.code() != StatusCode::kDataLoss && s.code() != StatusCode::kFailedPrecondition) {
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace shardpoint::internal;
  std::string_view in(reinterpret_cast<const char*>(data), size);
  Check(ParsePickle(
            in, [](std::string_view, std::string_view) { return true; }, "fuzz")
            .status());
  Check(DecodeDcpMetadata(in, "fuzz").status());
  Check(DecodeTensorPickle(in, "fuzz").status());
  return 0;
}
